//! Parsing of the probe's command-line values (durations, number lists), kept here so it is unit-tested.
//!
//! * Durations: a number with an optional unit, `5`, `5s`, `1.5s`, `500ms`, `2m` (a bare number is seconds).
//! * Number lists: comma-separated numbers and inclusive ranges, `0,100,1000` or `1-4,8`; order is kept,
//!   duplicates are removed (first occurrence wins).

use std::time::Duration;

/// Parses a duration such as `5`, `2.5s`, `300ms`, `1m`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let (num, mult) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix("us") {
        (n, 1e-6)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else {
        (t, 1.0)
    };
    let v: f64 = num.trim().parse().map_err(|_| format!("bad duration {s:?} (e.g. 5, 2.5s, 300ms, 1m)"))?;
    let secs = v * mult;
    if !secs.is_finite() || !(0.0..=1e9).contains(&secs) {
        return Err(format!("duration {s:?} out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Parses a list of numbers and inclusive ranges such as `0,100,1000` or `1-4,8`.
pub fn parse_list(s: &str) -> Result<Vec<usize>, String> {
    let mut out: Vec<usize> = Vec::new();
    let bad = || format!("bad list {s:?} (e.g. 0,100,1000 or 1-4)");
    for part in s.split(',').map(str::trim) {
        if part.is_empty() {
            return Err(bad());
        }
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => {
                (a.trim().parse::<usize>().map_err(|_| bad())?, b.trim().parse::<usize>().map_err(|_| bad())?)
            }
            None => {
                let v = part.parse::<usize>().map_err(|_| bad())?;
                (v, v)
            }
        };
        if a > b || b - a > 1_000_000 {
            return Err(bad());
        }
        for v in a..=b {
            if !out.contains(&v) {
                out.push(v);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("5").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("2.5s").unwrap(), Duration::from_millis(2500));
        assert_eq!(parse_duration("300ms").unwrap(), Duration::from_millis(300));
        assert_eq!(parse_duration("1m").unwrap(), Duration::from_secs(60));
        assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
        for bad in ["", "x", "-1", "5h", "nan", "1e30"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn lists() {
        assert_eq!(parse_list("0,100,1000").unwrap(), vec![0, 100, 1000]);
        assert_eq!(parse_list("1-4,2,8").unwrap(), vec![1, 2, 3, 4, 8]);
        assert_eq!(parse_list(" 3 ").unwrap(), vec![3]);
        for bad in ["", "1,,2", "4-1", "a", "1-", "-3"] {
            assert!(parse_list(bad).is_err(), "{bad}");
        }
    }
}
