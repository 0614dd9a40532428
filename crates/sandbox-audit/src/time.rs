//! Times of the audit query: RFC 3339 in and out, milliseconds since the Unix epoch inside.

use std::time::{Duration, UNIX_EPOCH};

/// Parses an RFC 3339 timestamp (`2026-12-02T00:00:00Z`, `2026-12-02T01:00:00.5+01:00`) into
/// ms since the Unix epoch. The offset is required (`Z` or `±HH:MM`).
/// Errors: a message saying what was expected.
pub fn parse_rfc3339_ms(s: &str) -> Result<i64, String> {
    const EXPECTED: &str = "expected an RFC 3339 time such as 2026-12-02T00:00:00Z";
    let s = s.trim();
    let (local, offset_s) = if let Some(local) = s.strip_suffix(['Z', 'z']) {
        (local, 0)
    } else {
        let cut = s.len().checked_sub(6).filter(|&i| s.is_char_boundary(i)).ok_or(EXPECTED)?;
        let (local, off) = s.split_at(cut);
        let b = off.as_bytes();
        let sign = match b[0] {
            b'+' => 1,
            b'-' => -1,
            _ => return Err(EXPECTED.into()),
        };
        let digits = |x: &[u8]| -> Option<i64> { std::str::from_utf8(x).ok()?.parse::<u8>().ok().map(i64::from) };
        let (Some(h), b':', Some(m)) = (digits(&b[1..3]), b[3], digits(&b[4..6])) else { return Err(EXPECTED.into()) };
        if h > 23 || m > 59 {
            return Err(EXPECTED.into());
        }
        (local, sign * (h * 3600 + m * 60))
    };
    // humantime reads the UTC form; the offset is applied afterwards.
    if local.len() < 19 || !matches!(local.as_bytes()[10], b'T' | b't') {
        return Err(EXPECTED.into());
    }
    let t = humantime::parse_rfc3339(&format!("{local}Z")).map_err(|_| EXPECTED.to_string())?;
    let ms = t.duration_since(UNIX_EPOCH).map_err(|_| "times before 1970 are not supported".to_string())?.as_millis();
    let ms = i64::try_from(ms).map_err(|_| EXPECTED.to_string())?;
    Ok(ms - offset_s * 1000)
}

/// Formats ms since the Unix epoch as RFC 3339 UTC with milliseconds (`2026-12-02T00:00:00.000Z`),
/// the one time format of the CLI's audit output.
pub fn format_ms(ms: i64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_with_z_and_offsets() {
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:01Z"), Ok(1000));
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:01.250Z"), Ok(1250));
        assert_eq!(parse_rfc3339_ms("1970-01-01T01:00:01+01:00"), Ok(1000));
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:01-00:30"), Ok(1000 + 1_800_000));
        assert_eq!(format_ms(1250), "1970-01-01T00:00:01.250Z");
    }

    #[test]
    fn refuses_what_is_not_rfc3339() {
        for bad in ["", "abc", "1700000000000", "2026-12-02", "2026-12-02T00:00:00", "2026-12-02 00:00:00Z", "2026-12-02T00:00:00+1:00", "2026-13-02T00:00:00Z"]
        {
            assert!(parse_rfc3339_ms(bad).is_err(), "{bad:?}");
        }
    }
}
