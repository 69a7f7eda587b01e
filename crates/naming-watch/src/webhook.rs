//! The webhook target: one JSON POST over plain HTTP/1.1 (hyper's connection API, no TLS).

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

/// An `http://host:port/path` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpUrl {
    /// host:port to connect to (port 80 when the URL names none).
    pub authority: String,
    pub host: String,
    pub path: String,
}

impl HttpUrl {
    pub fn parse(url: &str) -> Result<HttpUrl, String> {
        let rest = url.strip_prefix("http://").ok_or_else(|| format!("{url:?}: only http:// URLs are supported"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if authority.is_empty() || authority.contains('@') {
            return Err(format!("{url:?}: needs a host (and no user info)"));
        }
        let (host, authority) = match authority.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => {
                p.parse::<u16>().map_err(|_| format!("{url:?}: bad port {p:?}"))?;
                (h.to_string(), authority.to_string())
            }
            _ => (authority.to_string(), format!("{authority}:80")),
        };
        Ok(HttpUrl { authority, host, path: path.to_string() })
    }
}

/// POSTs `json` to `url`; `Ok` only for a 2xx answer, all within `timeout`.
pub async fn post_json(url: &HttpUrl, json: Vec<u8>, timeout: Duration) -> Result<u16, String> {
    tokio::time::timeout(timeout, post(url, json))
        .await
        .map_err(|_| format!("no answer within {} ms", timeout.as_millis()))?
}

async fn post(url: &HttpUrl, json: Vec<u8>) -> Result<u16, String> {
    let stream = tokio::net::TcpStream::connect(&url.authority).await.map_err(|e| format!("connect: {e}"))?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| format!("handshake: {e}"))?;
    // The connection task ends when the request is done or the sender is dropped.
    let driver = tokio::spawn(conn);
    let req = hyper::Request::post(url.path.as_str())
        .header(hyper::header::HOST, url.authority.as_str())
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .header(hyper::header::USER_AGENT, "paxsql-watch")
        .body(Full::new(Bytes::from(json)))
        .map_err(|e| format!("request: {e}"))?;
    let res = sender.send_request(req).await.map_err(|e| format!("send: {e}"))?;
    let status = res.status();
    // Read the body so the server sees a complete exchange; its content does not matter.
    let _ = res.into_body().collect().await;
    drop(sender);
    driver.abort();
    if status.is_success() {
        Ok(status.as_u16())
    } else {
        Err(format!("HTTP {status}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let u = HttpUrl::parse("http://127.0.0.1:8080/hook/master").unwrap();
        assert_eq!(
            (u.authority.as_str(), u.host.as_str(), u.path.as_str()),
            ("127.0.0.1:8080", "127.0.0.1", "/hook/master")
        );
        let u = HttpUrl::parse("http://naming.local").unwrap();
        assert_eq!((u.authority.as_str(), u.path.as_str()), ("naming.local:80", "/"));
        assert!(HttpUrl::parse("https://x/").unwrap_err().contains("only http://"));
        assert!(HttpUrl::parse("http://x:port/").unwrap_err().contains("bad port"));
        assert!(HttpUrl::parse("http:///p").is_err());
    }
}
