//! A run's pace: before it starts, how long it should take (from each
//! scenario's run time measured on a 2-core machine); as each scenario
//! ends, the time left, scaled by how this run's own pace compares with
//! the estimate so far, so a faster or busier machine corrects itself.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Estimates per job and the clock they are held to.
pub struct Pace {
    started: Instant,
    /// Each job's estimated seconds (every point and repeat), where known.
    estimates: Vec<Option<f64>>,
}

impl Pace {
    /// Start the clock.
    pub fn new(estimates: Vec<Option<f64>>) -> Pace {
        Pace { started: Instant::now(), estimates }
    }

    fn known(&self) -> bool {
        self.estimates.iter().any(Option::is_some)
    }

    /// Say on stderr what the run will do and about how long it takes.
    pub fn announce(&self, repeat: u32) {
        if !self.known() {
            return;
        }
        let total: f64 = self.estimates.iter().flatten().sum();
        let runs = if repeat > 1 { format!(", each {repeat} times") } else { String::new() };
        eprintln!(
            "[    0.0 s] plan: {} scenario(s){runs}, about {} on a 2-core machine (ends near {})",
            self.estimates.len(),
            span(total),
            clock_after(total)
        );
    }

    /// Job `k` has ended: say how long the rest should take at this run's
    /// pace.
    pub fn done(&self, k: usize) {
        if !self.known() || k + 1 >= self.estimates.len() {
            return;
        }
        let elapsed = self.started.elapsed().as_secs_f64();
        let expected: f64 = self.estimates[..=k].iter().flatten().sum();
        let left: f64 = self.estimates[k + 1..].iter().flatten().sum();
        let pace = if expected > 0.0 { elapsed / expected } else { 1.0 };
        eprintln!(
            "[{elapsed:>7.1} s] {} of {} scenarios done at {pace:.2}× the estimate: about {} left (ends near {})",
            k + 1,
            self.estimates.len(),
            span(left * pace),
            clock_after(left * pace)
        );
    }
}

/// `95` → "1 min 35 s"; under a minute in seconds.
fn span(seconds: f64) -> String {
    let s = seconds.round() as u64;
    if s < 60 {
        format!("{s} s")
    } else {
        format!("{} min {} s", s / 60, s % 60)
    }
}

/// The UTC time of day `seconds` from now, as hh:mm (the hours and
/// minutes of the report's ISO 8601 time).
fn clock_after(seconds: f64) -> String {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let iso = mballoc_lab::report::utc(now + seconds.round() as u64);
    format!("{} UTC", &iso[11..16])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_read_as_minutes_and_seconds() {
        assert_eq!(span(42.4), "42 s");
        assert_eq!(span(95.0), "1 min 35 s");
        assert_eq!(span(600.0), "10 min 0 s");
    }

    #[test]
    fn a_clock_time_has_hours_and_minutes() {
        let c = clock_after(0.0);
        assert_eq!(c.len(), "hh:mm UTC".len(), "{c}");
        assert_eq!(&c[2..3], ":");
    }
}
