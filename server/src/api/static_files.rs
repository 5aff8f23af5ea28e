//! `--static DIR`: the files of a directory at `/`, served the way a CDN
//! serves a site's assets, so a first visit on a slow link fetches fewer
//! bytes and a reload asks again only for its HTML:
//! - gzip when the browser accepts it (on the fly; tower-http's
//!   compression), the wasm and scripts included;
//! - validators: tower-http's `Last-Modified` and an `ETag` (weak: the
//!   gzipped and plain answers are the same file), a match answered `304`;
//! - `Cache-Control`: HTML (and a directory's index) `no-cache`, revalidated
//!   on every visit, since it names everything else; every other file may
//!   be reused for `--static-max-age` seconds without asking (the files'
//!   names carry no content hash here, so not `immutable`; an app serving
//!   the package from a versioned path gives those a year, see the npm
//!   README).

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderValue, Response, StatusCode};
use axum::middleware::{self, Next};
use axum::Router;
use tower_http::compression::predicate::{NotForContentType, Predicate, SizeAbove};
use tower_http::compression::CompressionLayer;
use tower_http::services::ServeDir;

/// The router serving `dir`, its non-HTML files reusable for `max_age`
/// seconds (0: every file revalidated).
pub fn router(dir: &str, max_age: u32) -> Router {
    let files = ServeDir::new(dir).append_index_html_on_directories(true);
    Router::new()
        .fallback_service(files)
        .layer(middleware::from_fn(move |req, next| {
            validators(req, next, max_age)
        }))
        .layer(CompressionLayer::new().compress_when(compressible()))
}

/// Gzipped when asked: anything of a packet or more but images (already
/// compressed).
fn compressible() -> impl Predicate {
    SizeAbove::new(SMALL).and(NotForContentType::IMAGES)
}

/// Smaller answers fit one packet as they are.
const SMALL: u16 = 1024;

/// Adds the `ETag` and `Cache-Control` of a file's answer and answers a
/// matching `If-None-Match` with `304`. With a tag asked, `ServeDir` sees
/// neither condition (a tag decides over a date, RFC 9110 §13.2.2) and
/// answers the file's headers, from which the tag is made the same way
/// whether the browser holds the file or not; its body is dropped unread.
/// A date alone is `ServeDir`'s to answer.
async fn validators(mut req: Request, next: Next, max_age: u32) -> Response<Body> {
    let asked = req.headers_mut().remove(header::IF_NONE_MATCH);
    if asked.is_some() {
        req.headers_mut().remove(header::IF_MODIFIED_SINCE);
    }
    let cache = cache_control(req.uri().path(), max_age);
    let mut res = next.run(req).await;
    if res.status() == StatusCode::NOT_MODIFIED {
        res.headers_mut().insert(header::CACHE_CONTROL, cache);
        return res;
    }
    if res.status() != StatusCode::OK {
        return res;
    }
    let Some(tag) = etag(res.headers()) else {
        return res;
    };
    let headers = res.headers_mut();
    headers.insert(header::CACHE_CONTROL, cache.clone());
    if asked.as_ref().is_some_and(|asked| matches(asked, &tag)) {
        let mut not_modified = Response::new(Body::empty());
        *not_modified.status_mut() = StatusCode::NOT_MODIFIED;
        let keep = not_modified.headers_mut();
        keep.insert(header::ETAG, tag);
        keep.insert(header::CACHE_CONTROL, cache);
        if let Some(modified) = res.headers().get(header::LAST_MODIFIED) {
            keep.insert(header::LAST_MODIFIED, modified.clone());
        }
        return not_modified;
    }
    res.headers_mut().insert(header::ETAG, tag);
    res
}

/// HTML names every other file (and the app's version): revalidated each
/// time. The rest: reused for `max_age` seconds.
fn cache_control(path: &str, max_age: u32) -> HeaderValue {
    let name = path.rsplit('/').next().unwrap_or("");
    let html = name.is_empty() || name.ends_with(".html") || !name.contains('.');
    if html || max_age == 0 {
        HeaderValue::from_static("no-cache")
    } else {
        HeaderValue::from_str(&format!("public, max-age={max_age}"))
            .expect("a header value of ASCII")
    }
}

/// `W/"<size>-<modified>"` of the file (as nginx makes its tags), from the
/// answer `ServeDir` made: its length and `Last-Modified`.
fn etag(headers: &HeaderMap) -> Option<HeaderValue> {
    let len = headers.get(header::CONTENT_LENGTH)?.to_str().ok()?;
    let modified = headers.get(header::LAST_MODIFIED)?.to_str().ok()?;
    let stamp = modified.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    HeaderValue::from_str(&format!("W/\"{len}-{stamp:x}\"")).ok()
}

/// A weak comparison (RFC 9110 §13.1.2): any listed tag, or `*`.
fn matches(asked: &HeaderValue, tag: &HeaderValue) -> bool {
    let strip = |t: &str| t.trim().trim_start_matches("W/").to_owned();
    let Ok(asked) = asked.to_str() else {
        return false;
    };
    let tag = strip(tag.to_str().unwrap_or_default());
    asked.split(',').any(|t| t.trim() == "*" || strip(t) == tag)
}

#[cfg(test)]
mod tests {
    use super::cache_control;

    #[test]
    fn html_is_revalidated_the_rest_reused() {
        assert_eq!(cache_control("/", 600), "no-cache");
        assert_eq!(cache_control("/bench/tab.html", 600), "no-cache");
        assert_eq!(cache_control("/app", 600), "no-cache");
        assert_eq!(
            cache_control("/pkg/web/index_bg.wasm", 600),
            "public, max-age=600"
        );
        assert_eq!(cache_control("/pkg/web/index.js", 0), "no-cache");
    }
}
