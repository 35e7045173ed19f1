//! Vector constants read by the instruction that uses them.
//!
//! Cranelift loads a vector constant (`vconst`) from its constant pool into a register once
//! per block and never folds it into an instruction's memory operand. A vector loop of `exp`
//! thus keeps a dozen constants in registers; with four vectors an iteration the allocator
//! spills. A load, though, Cranelift does fold into the instruction that uses it, when the
//! load has that one use and sits right before it. So the constants that math expansions use
//! once, by the next operation (`Emit::fconst_operand`: the Horner coefficients, the `1` of
//! `exp`), come from a table instead: each use gets a slot of its own
//! (one use per load, nothing for Cranelift to merge), and the loads are `readonly` and
//! `can_move`, so Cranelift places each where its use needs it, which is right before it.
//!
//! Such loads would also be hoisted out of the loop when their address is loop-invariant; the
//! table's address is therefore loaded again at the top of each loop body (`enter`), from the
//! table's first word, which holds it. One load an iteration buys a memory operand for every
//! use. callgrind, the exp-sum leaf of logsumexp rows of 4096: 42.8M instructions -> 34.8M.
//!
//! Only on x86-64, where instructions take memory operands, and in functions that expand
//! math; elsewhere the table stays off, `operand` declines and the constant is a `vconst`.

use crate::error::{Error, Result};
use cranelift_codegen::ir::{types, Endianness, InstBuilder, MemFlagsData, Type, Value};
use cranelift_frontend::FunctionBuilder;
use cranelift_module::{DataDescription, DataId, Module};
use target_lexicon::Architecture;

/// Bytes before the first slot: the table's own address, padded to a vector.
const HEADER: usize = 16;

/// The operand constants of one function, and where its current loop body finds them.
#[derive(Default)]
pub struct OperandTable {
    /// Whether the function's vector loops take constants from the table: they expand math,
    /// on a target whose instructions take memory operands.
    on: bool,
    data: Option<DataId>,
    bytes: Vec<u8>,
    /// The table's address, loaded in the current loop body; `None` outside loop bodies.
    base: Option<Value>,
}

impl OperandTable {
    /// The table of a function whose vector loops expand math (`math`); without math, or on
    /// a target without memory operands, it stays off and hands out nothing.
    pub fn new<M: Module>(module: &M, math: bool) -> Self {
        OperandTable {
            on: math && module.isa().triple().architecture == Architecture::X86_64,
            ..OperandTable::default()
        }
    }

    /// Starts a loop body in the current block: loads the table's address there (when on).
    pub fn enter<M: Module>(&mut self, b: &mut FunctionBuilder, module: &mut M) -> Result<()> {
        if !self.on {
            return Ok(());
        }
        let id = match self.data {
            Some(id) => id,
            None => {
                let id = module
                    .declare_anonymous_data(false, false)
                    .map_err(|e| Error::Unsupported(format!("operand table: {e}")))?;
                self.bytes = vec![0; HEADER];
                self.data = Some(id);
                id
            }
        };
        let ptr = module.target_config().pointer_type();
        let gv = module.declare_data_in_func(id, b.func);
        let at = b.ins().symbol_value(ptr, gv);
        // Not `readonly`: an ordinary load stays where it is, in the loop body, and so does
        // everything that depends on it.
        self.base = Some(b.ins().load(ptr, MemFlagsData::trusted(), at, 0));
        Ok(())
    }

    /// Ends the loop body: later constants are `vconst`s again.
    pub fn leave(&mut self) {
        self.base = None;
    }

    /// A load of `v` in every lane of the float vector type `ty`, from a slot of its own,
    /// inside a loop body; `None` outside one.
    pub fn operand(&mut self, b: &mut FunctionBuilder, ty: Type, v: f64) -> Option<Value> {
        let base = self.base?;
        let at = self.bytes.len();
        let lanes = ty.lane_count() as usize;
        match ty.lane_type() {
            types::F32 => self.bytes.extend((v as f32).to_le_bytes().repeat(lanes)),
            types::F64 => self.bytes.extend(v.to_le_bytes().repeat(lanes)),
            t => unreachable!("operand constants are floats, not {t}"),
        }
        let flags = MemFlagsData::trusted()
            .with_endianness(Endianness::Little)
            .with_readonly()
            .with_can_move();
        Some(b.ins().load(ty, flags, base, at as i32))
    }

    /// Defines the table's data (after the function that reads it is built), if it has any.
    pub fn define<M: Module>(self, module: &mut M) -> Result<()> {
        let Some(id) = self.data else {
            return Ok(());
        };
        let mut desc = DataDescription::new();
        desc.define(self.bytes.into_boxed_slice());
        desc.set_align(16);
        let own = module.declare_data_in_data(id, &mut desc);
        desc.write_data_addr(0, own, 0);
        module
            .define_data(id, &desc)
            .map_err(|e| Error::Unsupported(format!("operand table: {e}")))
    }
}
