//! Cookie-authenticated pages: `--allow-credentials` (CORS answers that let
//! an explicit origin send cookies, refused beside `*`) and the
//! `replay_token` cookie the `--token` check accepts instead of the bearer
//! header.

mod common;

use common::bin::binary_refuses;

use common::*;
use reqwest::{Method, StatusCode};

const ORIGIN: &str = "http://localhost:5173";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_credentials_answers_an_explicit_origin_with_credentials() {
    let s = server_with(|c| {
        c.allow_origins = vec![ORIGIN.into()];
        c.allow_credentials = true;
    })
    .await;
    let preflight = s
        .http
        .request(Method::OPTIONS, s.url("/v1/sessions"))
        .header("origin", ORIGIN)
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "content-type")
        .send()
        .await
        .unwrap();
    assert!(preflight.status().is_success(), "{}", preflight.status());
    let h = preflight.headers();
    assert_eq!(h["access-control-allow-origin"], ORIGIN);
    assert_eq!(h["access-control-allow-credentials"], "true");
    let r = s
        .http
        .get(s.url("/v1/diagnostics"))
        .header("origin", ORIGIN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["access-control-allow-origin"], ORIGIN);
    assert_eq!(r.headers()["access-control-allow-credentials"], "true");
    // Without the flag no answer lets a page send cookies.
    let plain = server_with(|c| c.allow_origins = vec![ORIGIN.into()]).await;
    let r = plain
        .http
        .get(plain.url("/v1/diagnostics"))
        .header("origin", ORIGIN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["access-control-allow-origin"], ORIGIN);
    assert!(r
        .headers()
        .get("access-control-allow-credentials")
        .is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_credentials_with_any_origin_or_none_is_refused_at_start() {
    for (origins, says) in [
        (vec!["*"], "--allow-origin '*'"),
        (vec!["http://a.test", "*"], "--allow-origin '*'"),
        (vec![], "needs the pages' origins"),
    ] {
        let mut cfg = test_config();
        cfg.allow_origins = origins.iter().map(|o| o.to_string()).collect();
        cfg.allow_credentials = true;
        let err = replay_server::start(cfg).await.err().expect("refused");
        assert!(err.to_string().contains(says), "{origins:?}: {err}");
    }
    // The binary says so and exits.
    let stderr = binary_refuses(
        &[
            "--listen",
            "127.0.0.1:0",
            "--allow-origin",
            "*",
            "--allow-credentials",
        ],
        &[],
    );
    assert!(
        stderr.contains("refusing --allow-credentials with --allow-origin '*'"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_check_takes_the_replay_token_cookie() {
    let s = server_with(|c| c.token = Some("sekret".into())).await;
    let get = |cookie: Option<&str>| {
        let mut r = s.http.get(s.url("/v1/diagnostics"));
        if let Some(c) = cookie {
            r = r.header("cookie", c);
        }
        r.send()
    };
    for ok in [
        "replay_token=sekret",
        "theme=dark; replay_token=sekret; other=1",
        "replay_token=\"sekret\"",
    ] {
        let r = get(Some(ok)).await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{ok}");
    }
    for refused in [
        None,
        Some("replay_token=wrong"),
        Some("replay_token="),
        Some("other_token=sekret"),
        Some("xreplay_token=sekret"),
    ] {
        let r = get(refused).await.unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{refused:?}");
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body["error"], "unauthorized");
        assert!(
            body["message"].as_str().unwrap().contains("replay_token"),
            "{body}"
        );
    }
    // A cookie authenticates writes too (the page's POSTs).
    let r = s
        .http
        .post(s.url("/v1/sessions"))
        .header("cookie", "replay_token=sekret")
        .json(&serde_json::json!({"title": "cookie"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    // The bearer header still works, and a right cookie does not need one.
    let r = s
        .http
        .get(s.url("/v1/diagnostics"))
        .bearer_auth("sekret")
        .header("cookie", "replay_token=wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
}
