//! Fuzz targets on stable Rust: a proptest strategy driven for a number of
//! inputs or for a length of time, the one runner every target uses.
//!
//! - `PROPTEST_CASES=N`: N inputs (proptest's own variable; 256 when unset).
//! - `CMCP_FUZZ_SECONDS=S`: as many inputs as fit in S seconds, in rounds
//!   of fresh random seeds; it wins over `PROPTEST_CASES`.
//!
//! A failing input is shrunk by proptest and the target panics with it. Each
//! run prints `fuzz <target>: <inputs> inputs in <s> s (<rate>/s)` to
//! stderr (`--nocapture` shows it).

use std::fmt::Debug;
use std::time::{Duration, Instant};

use proptest::strategy::Strategy;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};

/// The variable that turns a count of inputs into a length of time.
pub const SECONDS_VAR: &str = "CMCP_FUZZ_SECONDS";

/// How long or how many inputs a target runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Budget {
    Inputs(u32),
    Time(Duration),
}

impl Budget {
    /// From `CMCP_FUZZ_SECONDS`, else `PROPTEST_CASES` (through proptest's
    /// default config), else 256 inputs.
    pub fn from_env() -> Budget {
        match std::env::var(SECONDS_VAR).ok() {
            Some(s) => match s.trim().parse::<f64>() {
                Ok(secs) if secs.is_finite() && secs > 0.0 => {
                    Budget::Time(Duration::from_secs_f64(secs))
                }
                _ => panic!("{SECONDS_VAR} must be a positive number of seconds, not {s:?}"),
            },
            None => Budget::Inputs(Config::default().cases),
        }
    }
}

/// What one target did.
#[derive(Debug, Clone, Copy)]
pub struct Figures {
    pub inputs: u64,
    pub elapsed: Duration,
}

impl Figures {
    pub fn per_second(&self) -> f64 {
        self.inputs as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

fn config(cases: u32) -> Config {
    Config {
        cases,
        // Targets run outside the proptest! macro, which knows the source
        // file; a shrunk failure is printed instead of persisted.
        failure_persistence: None,
        ..Config::default()
    }
}

/// Run `test` on inputs of `strategy` within the budget from the
/// environment; panics with the shrunk input that failed.
pub fn fuzz<S>(target: &str, strategy: S, test: impl Fn(S::Value) -> Result<(), TestCaseError>)
where
    S: Strategy,
    S::Value: Debug,
{
    fuzz_within(Budget::from_env(), target, strategy, test);
}

/// [`fuzz`] with an explicit budget.
pub fn fuzz_within<S>(
    budget: Budget,
    target: &str,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) -> Figures
where
    S: Strategy,
    S::Value: Debug,
{
    let start = Instant::now();
    let mut inputs: u64 = 0;
    let mut round = |cases: u32| match TestRunner::new(config(cases)).run(&strategy, &test) {
        Ok(()) => inputs += u64::from(cases),
        Err(TestError::Fail(why, input)) => {
            panic!("fuzz {target}: {why} for the input {input:?}")
        }
        Err(TestError::Abort(why)) => panic!("fuzz {target}: aborted: {why}"),
    };
    match budget {
        Budget::Inputs(n) => round(n),
        Budget::Time(limit) => {
            // Rounds grow while they are short, so the time check costs
            // nothing next to the inputs.
            let mut cases = 64u32;
            while start.elapsed() < limit {
                let t = Instant::now();
                round(cases);
                if t.elapsed() < Duration::from_millis(250) {
                    cases = cases.saturating_mul(2).min(1 << 20);
                }
            }
        }
    }
    let figures = Figures {
        inputs,
        elapsed: start.elapsed(),
    };
    eprintln!(
        "fuzz {target}: {} inputs in {:.1} s ({:.0}/s)",
        figures.inputs,
        figures.elapsed.as_secs_f64(),
        figures.per_second()
    );
    figures
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_count_runs_that_many_inputs() {
        let seen = std::cell::Cell::new(0u64);
        let f = fuzz_within(Budget::Inputs(100), "count", any::<u8>(), |_| {
            seen.set(seen.get() + 1);
            Ok(())
        });
        assert_eq!((f.inputs, seen.get()), (100, 100));
    }

    #[test]
    fn a_time_runs_until_it_is_spent() {
        let limit = Duration::from_millis(300);
        let f = fuzz_within(Budget::Time(limit), "time", any::<u8>(), |_| Ok(()));
        assert!(f.elapsed >= limit && f.inputs > 0, "{f:?}");
    }

    #[test]
    #[should_panic(expected = "fuzz failing: ")]
    fn a_failing_input_panics_with_it() {
        fuzz_within(Budget::Inputs(1000), "failing", 0u32..1000, |n| {
            prop_assert!(n < 10);
            Ok(())
        });
    }
}
