//! The IR's half of user-defined ops: what type checking, the text form, the optimizer and
//! the runtime need of an op (`CustomKernel`), its parameters, write requests, resources and
//! the registry of names for the text form. The gradient, which builds graph variables, is the
//! graph's half (`crate::custom`), so this layer imports nothing above it.

use super::TensorType;
use crate::tensor::Tensor;
use std::any::Any;
use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, OnceLock, RwLock};

/// How many inputs or outputs an op takes (libnd4j's declaration).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Arity {
    /// Exactly this many.
    Exactly(usize),
    /// This many or more.
    AtLeast(usize),
    /// Any number, none included.
    Any,
}

impl Arity {
    /// Whether `n` inputs or outputs are allowed.
    pub fn accepts(self, n: usize) -> bool {
        match self {
            Arity::Exactly(k) => n == k,
            Arity::AtLeast(k) => n >= k,
            Arity::Any => true,
        }
    }
}

impl fmt::Display for Arity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Arity::Exactly(k) => write!(f, "{k}"),
            Arity::AtLeast(k) => write!(f, "at least {k}"),
            Arity::Any => write!(f, "any number of"),
        }
    }
}

/// The parameters of an op: they define its equality and hash (two ops with the same name and
/// parameters do the same thing and are merged) and its attributes in the text form.
#[derive(Clone, Debug, Default)]
pub struct OpParams {
    /// Integer arguments (libnd4j's iArgs), named for the text form.
    pub ints: Vec<(String, Vec<i64>)>,
    /// Float arguments (libnd4j's tArgs), compared by bits.
    pub floats: Vec<(String, Vec<f64>)>,
}

impl OpParams {
    /// No parameters.
    pub fn new() -> OpParams {
        OpParams::default()
    }

    /// Adds the integer parameter `name` (builder style).
    pub fn int(mut self, name: &str, v: impl Into<Vec<i64>>) -> OpParams {
        self.ints.push((name.to_string(), v.into()));
        self
    }

    /// Adds the float parameter `name` (builder style).
    pub fn float(mut self, name: &str, v: impl Into<Vec<f64>>) -> OpParams {
        self.floats.push((name.to_string(), v.into()));
        self
    }

    /// The integer parameter `name`, if there is one (the first, if added twice).
    pub fn get_ints(&self, name: &str) -> Option<&[i64]> {
        self.ints
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| &v[..])
    }

    /// The float parameter `name`, if there is one (the first, if added twice).
    pub fn get_floats(&self, name: &str) -> Option<&[f64]> {
        self.floats
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| &v[..])
    }
}

impl PartialEq for OpParams {
    fn eq(&self, o: &OpParams) -> bool {
        self.ints == o.ints
            && self.floats.len() == o.floats.len()
            && self.floats.iter().zip(&o.floats).all(|((a, x), (b, y))| {
                a == b
                    && x.len() == y.len()
                    && x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits())
            })
    }
}
impl Eq for OpParams {}
impl Hash for OpParams {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.ints.hash(h);
        for (n, v) in &self.floats {
            n.hash(h);
            v.iter().for_each(|x| x.to_bits().hash(h));
        }
    }
}

/// MXNet's write request: how a kernel writes one output.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum WriteRequest {
    /// Write the output; its storage holds nothing of value (`kWriteTo`).
    WriteTo,
    /// The output storage already holds the input this output may overwrite (`kWriteInplace`):
    /// for an op whose `inplace()` is true, output 0's storage holds input 0's data, moved there
    /// because nothing reads it afterwards, and `inputs[0]` is then an empty placeholder. Read
    /// the input from the output storage and overwrite it.
    WriteInplace,
    /// Add the result to what the output storage already holds (`kAddTo`), used to accumulate
    /// gradients into an existing buffer.
    AddTo,
    /// The output is not needed; skip it (`kNullOp`).
    Null,
}

/// Resources an op may ask for (MXNet's `ResourceRequest`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Resource {
    /// Scratch memory of this many bytes for the duration of one `perform`.
    TempSpace(usize),
    /// A random generator seeded per call from the function's seed and the op's position.
    Random,
}

/// What `perform` gets besides its inputs.
pub struct PerformContext<'a> {
    /// One write request per output (hidden outputs included).
    pub requests: &'a [WriteRequest],
    /// Scratch space, if the op asked for [`Resource::TempSpace`].
    pub temp: &'a mut Vec<u8>,
    /// A counter-based generator key, if the op asked for [`Resource::Random`]: use it with
    /// `kiln::random` (`uniform_f32(seed, i)` ...).
    pub seed: u64,
}

/// The half of a user-defined op that the IR, the optimizer and the runtime read: everything
/// but the gradient, which lives with the graph (`crate::custom::CustomOp`, the trait users
/// implement; every `CustomOp` is a `CustomKernel`).
pub trait CustomKernel: Send + Sync + fmt::Debug + 'static {
    /// The op's name (also its name in the text form: `custom "NAME"`).
    fn name(&self) -> &str;

    /// Parameters defining equality, hashing and the text-form attributes.
    fn params(&self) -> OpParams {
        OpParams::new()
    }

    /// How many inputs the op takes.
    fn num_inputs(&self) -> Arity {
        Arity::Any
    }

    /// The type check: given input types, output types (hidden outputs last) or a clear error.
    fn make_node(&self, inputs: &[&TensorType]) -> Result<Vec<TensorType>, String>;

    /// Computes the outputs. `outputs[i]` holds what that output held after the previous call
    /// (or `None` the first time): the op may reuse it or replace it, and must leave `Some`.
    fn perform(
        &self,
        inputs: &[&Tensor],
        outputs: &mut [Option<Tensor>],
        ctx: &mut PerformContext<'_>,
    ) -> Result<(), String>;

    /// Output shapes from input shapes (Theano's shape function); by default `make_node` on
    /// fully known types. It resolves the `?` dims `make_node` leaves where the input shapes
    /// are known (the output types get these shapes), sizes the outputs `perform` finds (made
    /// on the first call, remade when their shape changes), and sizes results for the check
    /// that they fit in memory. An `Err` means "not known before `perform`"; shapes that
    /// contradict `make_node` are an error.
    fn infer_shape(&self, input_types: &[&TensorType]) -> Result<Vec<Vec<usize>>, String> {
        self.make_node(input_types)?
            .into_iter()
            .map(|t| {
                t.known_shape().ok_or_else(|| {
                    format!(
                        "{}: output shape is not determined by input shapes",
                        self.name()
                    )
                })
            })
            .collect()
    }

    /// `(output, input)` pairs: the output overwrites that input's buffer.
    fn destroy_map(&self) -> Vec<(usize, usize)> {
        vec![]
    }

    /// `(output, input)` pairs: the output aliases that input.
    fn view_map(&self) -> Vec<(usize, usize)> {
        vec![]
    }

    /// How many trailing outputs are hidden: kept by the op (a growing buffer, a cached plan)
    /// and not shown to callers.
    fn num_hidden_outputs(&self) -> usize {
        0
    }

    /// Theano's `default_output`: the visible output that `Graph::apply_custom_default` returns,
    /// for ops with one main result and auxiliary ones.
    fn default_output(&self) -> usize {
        0
    }

    /// Whether the op may run in place when its input is free (libnd4j's in-place flag): the
    /// runtime then hands the input's buffer as output 0 storage with `WriteInplace`.
    fn inplace(&self) -> bool {
        false
    }

    /// Whether the op can add its output to what the output storage holds
    /// (`WriteRequest::AddTo`). The runtime then accumulates `t + op(..)` (or `op(..) + t`) in
    /// `t`'s buffer when `t` is a temporary that dies there, and skips the `add`; the optimizer
    /// keeps such an add out of fusion and runs the op right before it (`add_to_operand`).
    fn supports_add_to(&self) -> bool {
        false
    }

    /// Resources the op needs.
    fn resources(&self) -> Vec<Resource> {
        vec![]
    }
}

/// A shared handle to a custom op, compared and hashed by name and parameters.
///
/// It holds the op twice, type-erased two ways: as the IR's [`CustomKernel`], and as whatever
/// the graph layer stored (`crate::custom` keeps the user's `CustomOp` there, to reach its
/// gradient) without this layer naming it.
#[derive(Clone)]
pub struct CustomOpRef {
    kernel: Arc<dyn CustomKernel>,
    user: Arc<dyn Any + Send + Sync>,
}

impl CustomOpRef {
    /// A handle over `kernel`, with `user` kept for the layer that made it.
    pub fn from_parts(kernel: Arc<dyn CustomKernel>, user: Arc<dyn Any + Send + Sync>) -> Self {
        CustomOpRef { kernel, user }
    }

    /// What the layer that made the handle stored beside the kernel.
    pub fn user(&self) -> &(dyn Any + Send + Sync) {
        &*self.user
    }
}

impl fmt::Debug for CustomOpRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.kernel, f)
    }
}

impl PartialEq for CustomOpRef {
    fn eq(&self, o: &CustomOpRef) -> bool {
        self.kernel.name() == o.kernel.name() && self.kernel.params() == o.kernel.params()
    }
}
impl Eq for CustomOpRef {}
impl Hash for CustomOpRef {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.kernel.name().hash(h);
        self.kernel.params().hash(h);
    }
}

impl std::ops::Deref for CustomOpRef {
    type Target = dyn CustomKernel;
    fn deref(&self) -> &(dyn CustomKernel + 'static) {
        &*self.kernel
    }
}

// Names of custom ops for the text form: `%o = custom "tear" %x {dims = [1]}` finds the
// factory registered under "tear" and builds the op from the attributes.

/// Builds a custom op from the attributes written in the text form.
pub type CustomOpFactory = Arc<dyn Fn(&OpParams) -> Result<CustomOpRef, String> + Send + Sync>;

fn registry() -> &'static RwLock<HashMap<String, CustomOpFactory>> {
    static R: OnceLock<RwLock<HashMap<String, CustomOpFactory>>> = OnceLock::new();
    R.get_or_init(Default::default)
}

/// Registers `factory` under `name`, replacing an earlier registration of that name.
pub fn register_custom_op(
    name: &str,
    factory: impl Fn(&OpParams) -> Result<CustomOpRef, String> + Send + Sync + 'static,
) {
    registry()
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(name.to_string(), Arc::new(factory));
}

/// The op registered under `name`, built from `params`.
pub fn lookup_custom_op(name: &str, params: &OpParams) -> Result<CustomOpRef, String> {
    let f = registry()
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(name)
        .cloned()
        .ok_or_else(|| format!("no custom op named \"{name}\" is registered"))?;
    f(params)
}

/// Which operand of the instruction `add` a custom op may accumulate into its other operand's
/// buffer (MXNet's `kAddTo`, gradient accumulation without a temporary): `add` is an `add` of
/// two different values, operand `k` is a visible output of a custom op that supports `AddTo`
/// and is read by nothing but this add (`reads` counts every read, function outputs
/// included), and the other operand and the sum have its type. `producer` gives the
/// instruction that defines a value. The one reading of this rule: the optimizer keeps such
/// an add out of fusion and schedules the op next to it (`rewrite::accumulate`), the runtime
/// then issues the request (`runtime::requests`).
pub fn add_to_operand<'f>(
    func: &'f super::Func,
    add: &super::Inst,
    producer: &dyn Fn(super::Value) -> Option<&'f super::Inst>,
    reads: &dyn Fn(super::Value) -> usize,
) -> Option<usize> {
    use super::{BinaryOp, Op};
    if add.op != Op::Binary(BinaryOp::Add) || add.args.len() != 2 || add.args[0] == add.args[1] {
        return None;
    }
    (0..2).find(|&k| {
        let (r, other) = (add.args[k], add.args[1 - k]);
        let Some(p) = producer(r) else { return false };
        let Op::Custom(c) = &p.op else { return false };
        let visible = p.results.len().saturating_sub(c.num_hidden_outputs());
        c.supports_add_to()
            && p.results[..visible].contains(&r)
            && reads(r) == 1
            && func.ty(other) == func.ty(r)
            && func.ty(add.results[0]) == func.ty(r)
    })
}
