//! Calls with several parallel steps run on rayon's pool with the other workers kept awake.
//!
//! A parallel step started from the caller's thread (not one of rayon's) is injected into the
//! pool: a worker has to wake to run it, the caller sleeps until it is done and then has to
//! wake in turn. Each wake-up costs tens of microseconds on the benchmark machine: W5's
//! 256 x 512 x 10 product took 39-47 us back to back, 66-73 us after 100 us of serial work
//! and 78-82 us after 200 us (`examples`-style loop around `gemm::gemm`, 2 threads), against
//! 30-37 us run from a worker with the other worker spinning. W5 has a dozen parallel steps
//! with serial ones between them, so the whole call runs on a worker here and the other
//! workers spin (`rayon::yield_now`, taking any job the call's steps spawn) until it ends,
//! as OpenMP runtimes spin between parallel regions. It costs a core's idle time during the
//! call, so only plans with at least two parallel steps get it.

use std::sync::atomic::{AtomicBool, Ordering};

/// Whether a call of a plan with `parallel_steps` steps that may run on several threads is
/// worth running on the pool, from this thread.
pub(super) fn worthwhile(parallel_steps: usize) -> bool {
    parallel_steps >= 2
        && rayon::current_thread_index().is_none()
        && rayon::current_num_threads() > 1
}

/// Runs `f` on one of rayon's workers while the others spin, taking the jobs `f` spawns.
pub(super) fn run<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    let stop = AtomicBool::new(false);
    rayon::scope(|s| {
        let caller = rayon::current_thread_index();
        let stop = &stop;
        for _ in 1..rayon::current_num_threads() {
            s.spawn(move |_| {
                // On the thread running `f` (it picked this job up while waiting on one of
                // its own), spinning would wait for itself.
                if rayon::current_thread_index() == caller {
                    return;
                }
                while !stop.load(Ordering::Acquire) {
                    if rayon::yield_now() != Some(rayon::Yield::Executed) {
                        // Give the core to whatever else is runnable: on a quiet machine nothing
                        // is and this returns at once (the worker stays warm); where another
                        // process keeps a core busy, a bare spin took the time our caller's
                        // thread needed (GPT step, one of two cores busy: 270 ms spinning,
                        // 180 yielding, 90 quiet).
                        std::thread::yield_now();
                    }
                }
            });
        }
        /// Stops the spinning however `f` ends (a panic included).
        struct Stop<'a>(&'a AtomicBool);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Release);
            }
        }
        let _stop = Stop(stop);
        f()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `f` runs on a worker, its jobs run, and the call ends (the spinners stop).
    #[test]
    fn runs_on_a_worker_and_returns() {
        let (on_worker, sum) = run(|| {
            use rayon::prelude::*;
            let sum: u64 = (0..100_000u64).into_par_iter().sum();
            (rayon::current_thread_index().is_some(), sum)
        });
        assert!(on_worker);
        assert_eq!(sum, 99_999 * 100_000 / 2);
        // From a worker it is not worth it: the call would wait on its own pool.
        assert!(!rayon::scope(|_| worthwhile(10)));
        assert!(!worthwhile(1));
    }

    /// A panic in `f` reaches the caller, and the spinners still stop.
    #[test]
    fn a_panic_stops_the_spinners() {
        let caught = std::panic::catch_unwind(|| run(|| panic!("in the plan")));
        assert!(caught.is_err());
        assert_eq!(run(|| 7), 7);
    }

    /// Callers on several threads at once, each spawning work: none waits forever.
    #[test]
    fn concurrent_callers_finish() {
        std::thread::scope(|s| {
            for t in 0..4u64 {
                s.spawn(move || {
                    for i in 0..50u64 {
                        let got = run(|| rayon::join(|| t * i, || t + i));
                        assert_eq!(got, (t * i, t + i));
                    }
                });
            }
        });
    }
}
