//! How long a delivery waits before its next attempt: exponential from the first delay, capped,
//! with "equal jitter" (a random point in the upper half of the step), so that many deliveries
//! failing at once against one receiver do not retry in step.

use super::config::Retry;
use std::time::Duration;

/// The wait after failed attempt `attempt` (1 for the first), with `unit` in [0, 1) drawn at random.
pub fn delay(retry: &Retry, attempt: u32, unit: f64) -> Duration {
    let step = retry.first_delay.saturating_mul(1u32.checked_shl(attempt.saturating_sub(1)).unwrap_or(u32::MAX)).min(retry.max_delay);
    step / 2 + step.mul_f64(unit.clamp(0.0, 1.0) / 2.0)
}

/// Whether an HTTP status may change on a retry: server errors, timeouts and rate limits may;
/// any other refusal (a wrong URL, a bad signature) will not.
pub fn retryable(status: u16) -> bool {
    status >= 500 || status == 408 || status == 429
}

#[cfg(test)]
mod tests {
    use super::*;

    fn retry() -> Retry {
        Retry { attempts: 10, first_delay: Duration::from_secs(1), max_delay: Duration::from_secs(30), timeout: Duration::from_secs(10) }
    }

    #[test]
    fn the_delay_doubles_up_to_the_cap_and_stays_in_the_upper_half_of_its_step() {
        let r = retry();
        let steps: Vec<u64> = (1..=7).map(|n| delay(&r, n, 0.999_999).as_millis() as u64).collect();
        assert_eq!(steps, [999, 1999, 3999, 7999, 15999, 29999, 29999]);
        assert_eq!(delay(&r, 3, 0.0), Duration::from_secs(2));
        assert_eq!(delay(&r, 200, 0.5), Duration::from_millis(22_500), "no overflow far past the cap");
    }

    #[test]
    fn only_answers_that_may_change_are_retried() {
        assert!([500, 502, 503, 408, 429].into_iter().all(retryable));
        assert!(![400, 401, 403, 404, 410, 422].into_iter().any(retryable));
    }
}
