//! Query parameters and the cursor rules (PROTOCOL.md §4.2).

use super::error::ApiError;

/// Query parameters, raw (values we read are numbers; no decoding needed).
pub struct Params(Vec<(String, String)>);

impl Params {
    /// Splits a raw query string.
    pub fn parse(raw: Option<&str>) -> Params {
        Params(
            raw.unwrap_or("")
                .split('&')
                .filter(|p| !p.is_empty())
                .map(|p| match p.split_once('=') {
                    Some((k, v)) => (k.to_owned(), v.to_owned()),
                    None => (p.to_owned(), String::new()),
                })
                .collect(),
        )
    }

    /// The first value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// A page size: default 500, at most 5000, at least 1. Digits too large
    /// for a u64 are a large limit, clamped like any other (as cursors past
    /// u64 are simply above the head).
    pub fn limit(&self) -> Result<usize, ApiError> {
        match self.get("limit") {
            None => Ok(500),
            Some(v) if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => {
                Ok(v.parse::<u64>().unwrap_or(u64::MAX).clamp(1, 5000) as usize)
            }
            Some(v) => Err(ApiError::bad_request(
                "invalid_limit",
                format!("limit {v:?} is not an integer"),
            )),
        }
    }
}

impl Params {
    /// The newest page's least size (`tail`, docs/protocol.md §4.1): at
    /// least 1, at most [`TAIL_MAX`]; `None` when not asked for.
    pub fn tail(&self) -> Result<Option<u64>, ApiError> {
        match self.get("tail") {
            None => Ok(None),
            Some(v) if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => Ok(Some(
                v.parse::<u64>().unwrap_or(u64::MAX).clamp(1, TAIL_MAX),
            )),
            Some(v) => Err(ApiError::bad_request(
                "invalid_tail",
                format!("tail {v:?} is not an integer"),
            )),
        }
    }
}

/// Most events a `tail` may ask for (the page itself is bounded by `limit`).
pub const TAIL_MAX: u64 = 5000;

/// Parses a cursor value: base-10 digits only. Digits too large for a u64 are
/// a valid cursor that is above any head.
pub fn parse_cursor(raw: &str) -> Result<u64, ApiError> {
    if raw.is_empty() || !raw.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ApiError::invalid_cursor(raw));
    }
    Ok(raw.parse::<u64>().unwrap_or(u64::MAX))
}

/// Checks a cursor against a head.
pub fn check_ahead(cursor: u64, epoch: &str, head: u64) -> Result<(), ApiError> {
    if cursor > head {
        Err(ApiError::cursor_ahead(cursor, epoch, head))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_parsing_follows_the_table() {
        assert_eq!(parse_cursor("0").unwrap(), 0);
        assert_eq!(parse_cursor("42").unwrap(), 42);
        assert_eq!(parse_cursor("99999999999999999999999").unwrap(), u64::MAX);
        for bad in ["", "-1", "+1", "1.5", "abc", " 1", "0x10"] {
            assert_eq!(
                parse_cursor(bad).unwrap_err().code(),
                "invalid_cursor",
                "{bad}"
            );
        }
    }

    #[test]
    fn limits_are_bounded() {
        assert_eq!(Params::parse(None).limit().unwrap(), 500);
        assert_eq!(Params::parse(Some("limit=0")).limit().unwrap(), 1);
        assert_eq!(Params::parse(Some("limit=9000")).limit().unwrap(), 5000);
        let huge = Params::parse(Some("limit=99999999999999999999"));
        assert_eq!(huge.limit().unwrap(), 5000);
        for bad in ["limit=x", "limit=", "limit=-1", "limit=+5", "limit=1.5"] {
            assert!(Params::parse(Some(bad)).limit().is_err(), "{bad}");
        }
    }
}
