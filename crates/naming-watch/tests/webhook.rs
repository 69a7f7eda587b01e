//! The webhook target against a small hyper server on loopback: the JSON body, failing answers, and the
//! watcher's retries until the endpoint accepts.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use paxsql_naming_watch::webhook::{post_json, HttpUrl};
use paxsql_naming_watch::{MasterInfo, Target};

/// A loopback HTTP server that answers the first `failures` requests with 503, then 200, and records bodies.
struct Hook {
    url: String,
    bodies: Arc<Mutex<Vec<(String, String, serde_json::Value)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Hook {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn hook(failures: usize) -> Hook {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/paxsql/master", listener.local_addr().unwrap());
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let seen = bodies.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let seen = seen.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                    let seen = seen.clone();
                    async move {
                        let (method, path) = (req.method().to_string(), req.uri().path().to_string());
                        let body = req.into_body().collect().await?.to_bytes();
                        let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                        let n = {
                            let mut s = seen.lock().unwrap();
                            s.push((method, path, json));
                            s.len()
                        };
                        let status = if n <= failures { StatusCode::SERVICE_UNAVAILABLE } else { StatusCode::OK };
                        let mut res = Response::new(Full::new(Bytes::from_static(b"ok")));
                        *res.status_mut() = status;
                        Ok::<_, hyper::Error>(res)
                    }
                });
                let _ =
                    hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
    Hook { url, bodies, task }
}

fn master() -> MasterInfo {
    MasterInfo {
        cluster_id: "c1".into(),
        master_id: 2,
        master_version: 5,
        mariadb: "127.0.0.2:24010".into(),
        proxy_rw: String::new(),
        changed_at: "2026-01-02T03:04:05.678Z".into(),
    }
}

#[tokio::test]
async fn webhook_posts_the_master_as_json() {
    let h = hook(0).await;
    let url = HttpUrl::parse(&h.url).unwrap();
    let body = serde_json::to_vec(&master()).unwrap();
    assert_eq!(post_json(&url, body, Duration::from_secs(5)).await, Ok(200));
    let got = h.bodies.lock().unwrap().clone();
    assert_eq!(got.len(), 1);
    let (method, path, json) = &got[0];
    assert_eq!((method.as_str(), path.as_str()), ("POST", "/paxsql/master"));
    assert_eq!(
        json,
        &serde_json::json!({
            "cluster_id": "c1", "master_id": 2, "master_version": 5, "mariadb": "127.0.0.2:24010",
            "proxy_rw": "", "changed_at": "2026-01-02T03:04:05.678Z"
        })
    );
}

#[tokio::test]
async fn webhook_errors_name_the_cause() {
    let h = hook(1).await;
    let url = HttpUrl::parse(&h.url).unwrap();
    let err = post_json(&url, b"{}".to_vec(), Duration::from_secs(5)).await.unwrap_err();
    assert!(err.contains("503"), "{err}");
    // Nothing listens on port 1 of loopback.
    let closed = HttpUrl::parse("http://127.0.0.1:1/x").unwrap();
    assert!(post_json(&closed, b"{}".to_vec(), Duration::from_secs(5)).await.unwrap_err().contains("connect"));
    let t = Target::Webhook { url, raw: h.url.clone(), timeout: Duration::from_secs(5) };
    assert!(t.update(&master()).await.is_ok(), "second request gets 200");
}
