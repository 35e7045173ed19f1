//! The optimizer's pipeline: the stages of this module in order, with their dumps.

use crate::dump::DumpOptions;
use crate::ir::{Func, Value};

/// The optimizer's switches (the compile options' part that concerns it).
#[derive(Clone, Debug)]
pub struct OptimizeOptions {
    /// Which stages to dump (`egraph`, `fused`, `inplace`).
    pub dump: DumpOptions,
    /// Run the optimizer at all (without it, in-place marks are cleared and nothing else).
    pub optimize: bool,
    /// Also apply rewrites that change NaN or inf results (docs/reference/semantics.md).
    pub fast_math: bool,
    /// Mark steps that may overwrite a dead argument's buffer (`inplace`).
    pub inplace: bool,
}

impl Default for OptimizeOptions {
    fn default() -> Self {
        OptimizeOptions {
            dump: DumpOptions::from_env(),
            optimize: true,
            fast_math: false,
            inplace: true,
        }
    }
}

/// The optimizer's stages, in order: dropping what no one reads from scans, moving work out
/// of scan loops (`rewrite::scan_pushout`), the e-graph pass
/// (dumped as `egraph`, with what each phase did as comments above the function), merging inside regions with the values around them
/// (`rewrite::merge_regions`), fusion (`fused`), then the in-place pass (`inplace`), which
/// overwrites no parameter.
pub fn optimize(func: Func, options: &OptimizeOptions) -> Func {
    optimize_donating(func, options, &[]).0
}

/// `optimize`, letting the in-place pass overwrite the `donated` parameters; also returns the
/// donated parameters it does overwrite. In-place marks in `func` (from the text form, say) are
/// never trusted: the pass computes them again, and without the optimizer there are none.
pub fn optimize_donating(
    mut func: Func,
    options: &OptimizeOptions,
    donated: &[Value],
) -> (Func, Vec<Value>) {
    if !options.optimize {
        super::inplace::clear_inplace(&mut func);
        dump_dot(options, &func);
        return (func, Vec::new());
    }
    let egraph_options = super::egraph::Options {
        fast_math: options.fast_math,
        ..Default::default()
    };
    super::prune_scans(&mut func);
    super::scan_pushout::push_out_of_scans(&mut func);
    let (mut rewritten, report) = super::egraph::run_owned(func, &egraph_options);
    options.dump.dump(&rewritten.name, "egraph", || {
        format!("{report}{}", crate::ir::text::print_func(&rewritten))
    });
    // The e-graph sees each region apart from the values around it; merge across.
    super::merge_regions(&mut rewritten);
    let mut fused = super::fuse(rewritten);
    super::accumulate::schedule_accumulation(&mut fused);
    options
        .dump
        .dump(&fused.name, "fused", || crate::ir::text::print_func(&fused));
    let destroyed = if options.inplace {
        super::inplace::insert_inplace(&mut fused, donated)
    } else {
        super::inplace::clear_inplace(&mut fused);
        Vec::new()
    };
    options.dump.dump(&fused.name, "inplace", || {
        crate::ir::text::print_func(&fused)
    });
    dump_dot(options, &fused);
    (fused, destroyed)
}

/// The `dot` dump: the function the backends get, as a Graphviz graph (`ir::dot`).
fn dump_dot(options: &OptimizeOptions, func: &Func) {
    (options.dump).dump(&func.name, "dot", || crate::ir::dot::func_to_dot(func));
}
