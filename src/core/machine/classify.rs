//! The one classification of non-2xx HTTP answers (PROTOCOL.md §6 rule 9):
//! a pure function of the status, the `Retry-After` header and the body.
//!
//! Only exact codes move a cursor: `400` with body code `invalid_cursor` and
//! `409` with `cursor_ahead`. A `400` or `409` without that code (a proxy,
//! a WAF, a load balancer's page) is an other 4xx: the caller stops with an
//! error and keeps its state, instead of discarding it as for a rejected
//! cursor.
//!
//! Reads (the machine's streams and pages) act on every class. A write
//! (`POST`) gets the same answer and reads it as: `Retry` → retry (as for a
//! network error), `RefreshCredentials` → refresh once then fail,
//! `CursorRejected` or `Fail` → fail with the body's code (the error's
//! [`code`](CoreError::code) / [`info`](CoreError::info)).

use super::backoff::{parse_retry_after, MAX_RETRY_HINT_MS};
use super::error::CoreError;
use crate::json;
use crate::protocol::ErrorBody;

/// At most this many characters of a body that is not an error JSON are
/// kept as the error's message (a proxy's HTML page says who refused).
const FOREIGN_BODY_CHARS: usize = 200;

/// What to do about one non-2xx answer.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum HttpClass {
    /// 5xx, 408, 429, or a status outside 4xx/5xx (a redirect the transport
    /// did not follow): transient, try again after backoff, never before
    /// `after` ms (the `Retry-After` hint, capped at
    /// [`MAX_RETRY_HINT_MS`]); `error` is what to report meanwhile.
    Retry {
        /// The server's hint in ms from now, capped; `None` without one.
        after: Option<u64>,
        /// The answer as an error, for the status and notices.
        error: CoreError,
    },
    /// 401 or 403: obtain fresh credentials once and try again at once; a
    /// second one in a row stops with `error`.
    RefreshCredentials {
        /// [`CoreError::Unauthorized`] with the status.
        error: CoreError,
    },
    /// Exactly `400 invalid_cursor` or `409 cursor_ahead`: the cursor cannot
    /// be used; a reader restores from 0 with a notice. The code is
    /// `error.code()`.
    CursorRejected {
        /// [`CoreError::InvalidCursor`] or [`CoreError::CursorAhead`].
        error: CoreError,
    },
    /// Any other 4xx: stop with this error (the body's code in
    /// [`CoreError::HttpStatus`]), keeping all local state.
    Fail(CoreError),
}

/// Classifies a non-2xx answer. `retry_after` is the raw header; an HTTP
/// date in it is read relative to `wall_now` (the wall clock, ms since the
/// Unix epoch: [`Machine::handle_wall_clock`](super::Machine::handle_wall_clock)).
/// `body` is read as an [`ErrorBody`] when it is one.
pub(crate) fn classify(
    status: u16,
    retry_after: Option<&str>,
    body: &[u8],
    wall_now: u64,
) -> HttpClass {
    let parsed: Option<ErrorBody> = json::from_slice(body).ok();
    let (code, message) = match parsed {
        Some(b) => (b.error, b.message),
        None => (String::new(), foreign_message(body)),
    };
    match (status, code.as_str()) {
        (401 | 403, _) => HttpClass::RefreshCredentials {
            error: CoreError::Unauthorized { status, message },
        },
        (400, "invalid_cursor") => HttpClass::CursorRejected {
            error: CoreError::InvalidCursor(message),
        },
        (409, "cursor_ahead") => HttpClass::CursorRejected {
            error: CoreError::CursorAhead(message),
        },
        (408 | 429, _) | (500..=599, _) => HttpClass::Retry {
            after: retry_after
                .and_then(|v| parse_retry_after(v, wall_now))
                .map(|ms| ms.min(MAX_RETRY_HINT_MS)),
            error: CoreError::HttpStatus {
                status,
                code,
                message,
            },
        },
        (400..=499, _) => HttpClass::Fail(CoreError::HttpStatus {
            status,
            code,
            message,
        }),
        _ => HttpClass::Retry {
            after: None,
            error: CoreError::HttpStatus {
                status,
                code,
                message,
            },
        },
    }
}

/// The start of a body that is not an error JSON, as text.
fn foreign_message(body: &[u8]) -> String {
    String::from_utf8_lossy(body)
        .trim()
        .chars()
        .take(FOREIGN_BODY_CHARS)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn body(code: &str) -> Vec<u8> {
        format!(r#"{{"error":"{code}","message":"m"}}"#).into_bytes()
    }

    fn code_of(class: &HttpClass) -> &str {
        match class {
            HttpClass::Retry { error, .. }
            | HttpClass::RefreshCredentials { error }
            | HttpClass::CursorRejected { error }
            | HttpClass::Fail(error) => error.code(),
        }
    }

    #[test]
    fn only_the_exact_codes_reject_a_cursor() {
        let rejected =
            |s, b: &[u8]| matches!(classify(s, None, b, 0), HttpClass::CursorRejected { .. });
        assert!(rejected(400, &body("invalid_cursor")));
        assert!(rejected(409, &body("cursor_ahead")));
        for (status, b) in [
            (400, b"".to_vec()),
            (400, b"<html>blocked</html>".to_vec()),
            (400, body("cursor_ahead")),
            (400, body("invalid_request")),
            (409, b"".to_vec()),
            (409, body("invalid_cursor")),
            (409, body("conflict")),
        ] {
            let class = classify(status, None, &b, 0);
            assert!(
                matches!(&class, HttpClass::Fail(CoreError::HttpStatus { status: s, .. }) if *s == status),
                "{status} {:?}: {class:?}",
                String::from_utf8_lossy(&b)
            );
        }
    }

    #[test]
    fn an_http_error_keeps_the_servers_code_beside_its_status() {
        let info = |status, b: &[u8]| match classify(status, None, b, 0) {
            HttpClass::Fail(e) | HttpClass::Retry { error: e, .. } => e.info(),
            other => panic!("{other:?}"),
        };
        let missing = info(404, &body("not_found"));
        assert_eq!(
            (missing.code.as_str(), missing.status),
            ("not_found", Some(404))
        );
        let down = info(503, &body("overloaded"));
        assert_eq!((down.code.as_str(), down.status), ("overloaded", Some(503)));
        // A body that names no code (a proxy's page): the generic code.
        let proxy = info(404, b"<html>not here</html>");
        assert_eq!(
            (proxy.code.as_str(), proxy.status),
            ("http_status", Some(404))
        );
    }

    #[test]
    fn a_foreign_body_is_kept_short_as_the_message() {
        let page = format!("  <html>{}</html>", "x".repeat(1000));
        match classify(400, None, page.as_bytes(), 0) {
            HttpClass::Fail(CoreError::HttpStatus { code, message, .. }) => {
                assert_eq!(code, "");
                assert!(message.starts_with("<html>xx"));
                assert_eq!(message.chars().count(), FOREIGN_BODY_CHARS);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn transient_statuses_retry_with_a_capped_hint() {
        for status in [408, 429, 500, 502, 503, 599, 302, 100] {
            assert!(
                matches!(
                    classify(status, None, b"", 0),
                    HttpClass::Retry { after: None, .. }
                ),
                "{status}"
            );
        }
        let after = |v| match classify(503, Some(v), b"", 1_000) {
            HttpClass::Retry { after, .. } => after,
            other => panic!("{other:?}"),
        };
        assert_eq!(after("7"), Some(7_000));
        assert_eq!(after("soon"), None);
        assert_eq!(after("99999999999999999999"), Some(MAX_RETRY_HINT_MS));
        assert_eq!(
            after("Fri, 31 Dec 9999 23:59:59 GMT"),
            Some(MAX_RETRY_HINT_MS)
        );
    }

    #[test]
    fn a_401_keeps_the_servers_reason() {
        let b = br#"{"error":"unauthorized","message":"missing or wrong bearer token"}"#;
        let HttpClass::RefreshCredentials { error } = classify(401, None, b, 0) else {
            panic!("a 401 refreshes the credentials");
        };
        assert_eq!(
            error.to_string(),
            "unauthorized (HTTP 401): missing or wrong bearer token"
        );
        let HttpClass::RefreshCredentials { error } = classify(403, None, b"", 0) else {
            panic!("a 403 refreshes the credentials");
        };
        assert_eq!(
            error.to_string(),
            "unauthorized (HTTP 403)",
            "no reason given"
        );
    }

    #[test]
    fn credentials_and_other_4xx_keep_the_bodys_code() {
        assert!(matches!(
            classify(401, None, b"", 0),
            HttpClass::RefreshCredentials {
                error: CoreError::Unauthorized { status: 401, .. }
            }
        ));
        assert_eq!(
            code_of(&classify(403, None, &body("forbidden"), 0)),
            "unauthorized"
        );
        match classify(422, None, &body("message_too_long"), 0) {
            HttpClass::Fail(e) => {
                assert_eq!((e.code(), e.status()), ("message_too_long", Some(422)));
                assert_eq!(e.info().code, "message_too_long");
                assert!(
                    matches!(e, CoreError::HttpStatus { code, .. } if code == "message_too_long")
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            code_of(&classify(400, None, &body("invalid_cursor"), 0)),
            "invalid_cursor"
        );
    }
}
