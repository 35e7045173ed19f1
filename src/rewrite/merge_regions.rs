//! Merging across region boundaries, after the e-graph pass.
//!
//! The e-graph pass merges equal instructions of the top-level body, and optimizes each region
//! of an `ifelse` as a function of the values it reads: a region's instruction never meets an
//! equal one computed outside it. This pass walks the function in order with a scoped table
//! from (op, arguments) to the results that compute it, and replaces an instruction inside a
//! region by the results of an equal one available there: one defined earlier in the same
//! region, in an enclosing region, or at top level before the `ifelse`. The instruction's
//! results are renamed in the rest of its region, in the regions nested in it and in yields.
//!
//! What may merge is what merges in the e-graph ([`mergeable`]): never an `ifelse`, never a
//! custom op with state or its own random stream; constants by content. Nothing moves out of a
//! region (an `ifelse` computes only the branch it takes), and a region's values are forgotten
//! when the region ends, so top-level code never reads them. An instruction whose result is
//! written in place (`inplace`) takes no part: its buffer is not the value for later readers.

use super::egraph::lang::mergeable;
use crate::ir::{Func, Inst, Op, Region, Value};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

/// Merges instructions inside regions with equal ones available to them; returns how many
/// were removed.
pub fn merge_regions(f: &mut Func) -> usize {
    if f.body.iter().all(|i| i.regions.is_empty()) {
        return 0;
    }
    let mut destroyed = HashSet::default();
    destroyed_values(&f.body, &mut destroyed);
    let mut walk = Walk {
        scopes: vec![HashMap::default()],
        destroyed,
        rename: HashMap::default(),
        dropped: HashSet::default(),
    };
    walk.body(&f.body, false);
    let Walk {
        rename, dropped, ..
    } = walk;
    if dropped.is_empty() {
        return 0;
    }
    apply(&mut f.body, &rename, &dropped);
    for o in f.outputs.iter_mut() {
        if let Some(&v) = rename.get(o) {
            *o = v;
        }
    }
    dropped.len()
}

/// The arguments that instructions overwrite in place (`inplace = k` names argument `k`).
fn destroyed_values(body: &[Inst], out: &mut HashSet<Value>) {
    for i in body {
        if let Some(k) = i.inplace {
            if let Some(&a) = i.args.get(k) {
                out.insert(a);
            }
        }
        for r in &i.regions {
            destroyed_values(&r.body, out);
        }
    }
}

type Key<'a> = (&'a Op, Vec<Value>);

struct Walk<'a> {
    /// The instructions available, innermost scope last: the top level, then each region
    /// the walk is in.
    scopes: Vec<HashMap<Key<'a>, &'a [Value]>>,
    destroyed: HashSet<Value>,
    /// Results of removed instructions, to the values that replace them.
    rename: HashMap<Value, Value>,
    /// The first result of each removed instruction.
    dropped: HashSet<Value>,
}

impl<'a> Walk<'a> {
    fn body(&mut self, body: &'a [Inst], in_region: bool) {
        for inst in body {
            if inst.regions.is_empty()
                && !inst.results.is_empty()
                && inst.inplace.is_none()
                && mergeable(&inst.op)
                && !inst.results.iter().any(|r| self.destroyed.contains(r))
            {
                let args: Vec<Value> = inst
                    .args
                    .iter()
                    .map(|a| self.rename.get(a).copied().unwrap_or(*a))
                    .collect();
                let key = (&inst.op, args);
                let found = self.scopes.iter().rev().find_map(|s| s.get(&key)).copied();
                match found {
                    Some(prev) if in_region && prev.len() == inst.results.len() => {
                        self.rename
                            .extend(inst.results.iter().copied().zip(prev.iter().copied()));
                        self.dropped.insert(inst.results[0]);
                    }
                    Some(_) => {}
                    None => {
                        let scope = self.scopes.last_mut().expect("the top-level scope");
                        scope.insert(key, &inst.results);
                    }
                }
            }
            for r in &inst.regions {
                self.region(r);
            }
        }
    }

    fn region(&mut self, r: &'a Region) {
        self.scopes.push(HashMap::default());
        self.body(&r.body, true);
        self.scopes.pop();
    }
}

/// Removes the dropped instructions and renames what reads their results.
fn apply(body: &mut Vec<Inst>, rename: &HashMap<Value, Value>, dropped: &HashSet<Value>) {
    let sub = |v: &mut Value| {
        if let Some(&s) = rename.get(v) {
            *v = s;
        }
    };
    body.retain(|i| i.results.first().is_none_or(|r| !dropped.contains(r)));
    for inst in body.iter_mut() {
        inst.args.iter_mut().for_each(sub);
        for r in inst.regions.iter_mut() {
            apply(&mut r.body, rename, dropped);
            r.yields.iter_mut().for_each(sub);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::merge_regions;
    use crate::ir::custom::{
        register_custom_op, CustomKernel, CustomOpRef, PerformContext, Resource,
    };
    use crate::ir::text::{parse, print_func};
    use crate::ir::TensorType;
    use crate::tensor::Tensor;

    fn merged(src: &str) -> (String, usize) {
        let mut f = parse("test", src).expect("parses").remove(0);
        let n = merge_regions(&mut f);
        crate::ir::verify::verify(&f).expect("verifies");
        (print_func(&f), n)
    }

    #[test]
    fn a_region_reuses_a_top_level_value_defined_before_it() {
        let (text, n) = merged(
            "func @f(%c: bool[], %x: f64[2]) -> (f64[2], f64[2]) {
               %a = exp %x
               %r = ifelse %c {
                 %b = exp %x
                 %d = neg %b
                 yield %d
               } else {
                 yield %x
               }
               return %r, %a
             }",
        );
        assert_eq!(n, 1, "{text}");
        assert!(text.contains("%d = neg %a"), "{text}");
        assert!(!text.contains("%b = exp"), "{text}");
    }

    #[test]
    fn top_level_code_never_reads_a_region_value() {
        let (text, n) = merged(
            "func @f(%c: bool[], %x: f64[2]) -> (f64[2], f64[2]) {
               %r = ifelse %c {
                 %b = exp %x
                 yield %b
               } else {
                 %e = exp %x
                 yield %e
               }
               %a = exp %x
               return %r, %a
             }",
        );
        assert_eq!(n, 0, "{text}");
    }

    #[test]
    fn a_value_written_in_place_is_not_shared() {
        // %n overwrites %b's buffer: %b must stay the region's own, or %n would overwrite %a.
        let mut f = parse(
            "test",
            "func @f(%c: bool[], %x: f64[2]) -> (f64[2], f64[2]) {
               %a = exp %x
               %r = ifelse %c {
                 %b = exp %x
                 %n = neg %b
                 yield %n
               } else {
                 yield %x
               }
               return %r, %a
             }",
        )
        .expect("parses")
        .remove(0);
        f.body[1].regions[0].body[1].inplace = Some(0);
        assert_eq!(merge_regions(&mut f), 0, "{}", print_func(&f));
    }

    #[derive(Debug)]
    struct Drawn {
        random: bool,
    }

    impl CustomKernel for Drawn {
        fn name(&self) -> &str {
            if self.random {
                "merge_regions_random"
            } else {
                "merge_regions_pure"
            }
        }
        fn make_node(&self, inputs: &[&TensorType]) -> Result<Vec<TensorType>, String> {
            Ok(vec![inputs[0].clone()])
        }
        fn perform(
            &self,
            inputs: &[&Tensor],
            outputs: &mut [Option<Tensor>],
            _: &mut PerformContext<'_>,
        ) -> Result<(), String> {
            outputs[0] = Some(inputs[0].clone());
            Ok(())
        }
        fn resources(&self) -> Vec<Resource> {
            if self.random {
                vec![Resource::Random]
            } else {
                vec![]
            }
        }
    }

    #[test]
    fn custom_ops_merge_only_without_their_own_random_stream() {
        for random in [false, true] {
            let name = Drawn { random }.name().to_string();
            register_custom_op(&name, move |_| {
                Ok(CustomOpRef::from_parts(
                    std::sync::Arc::new(Drawn { random }),
                    std::sync::Arc::new(()),
                ))
            });
            let (text, n) = merged(&format!(
                "func @f(%c: bool[], %x: f64[2]) -> (f64[2], f64[2]) {{
                   %a = custom \"{name}\" %x
                   %r = ifelse %c {{
                     %b = custom \"{name}\" %x
                     yield %b
                   }} else {{
                     yield %x
                   }}
                   return %r, %a
                 }}"
            ));
            assert_eq!(n, usize::from(!random), "{text}");
        }
    }
}
