//! Cluster authentication of peer calls.
//!
//! Every call carries two metadata entries: [`CLUSTER_ID_HEADER`] and [`CLUSTER_SECRET_HEADER`]. The receiver
//! checks the cluster id (a misconfiguration guard: two clusters on one network must not mix their logs) and the
//! secret (an access guard). The secret is compared in constant time: both sides are hashed with SHA-256 and the
//! digests compared with [`subtle::ConstantTimeEq`], so neither the position of the first differing byte nor the
//! secret's length shows in the response time. `subtle` is the dalek-cryptography crate used for exactly this by
//! the RustCrypto ecosystem; a plain `==` on strings returns at the first difference.
//!
//! The secret never appears in logs or `Debug` output: [`ClusterSecret`] prints `***`, the metadata value is marked
//! sensitive (HPACK never-indexed), and rejections log the peer address and which check failed, nothing more.

use std::fmt;
use std::net::SocketAddr;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tonic::metadata::{AsciiMetadataValue, MetadataMap};
use tonic::{Request, Status};

use crate::TransportError;

/// Metadata key carrying the sender's cluster id.
pub const CLUSTER_ID_HEADER: &str = "x-paxsql-cluster-id";
/// Metadata key carrying the cluster secret.
pub const CLUSTER_SECRET_HEADER: &str = "x-paxsql-cluster-secret";

/// Shortest accepted secret, in bytes: shorter ones are guessable.
pub const SECRET_MIN_BYTES: usize = 16;
/// Longest accepted secret and cluster id, in bytes (they travel in HTTP/2 headers).
pub const METADATA_MAX_BYTES: usize = 256;

/// The shared cluster secret. `Debug` prints `***`; the only way to the bytes is inside this crate.
#[derive(Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(transparent)]
pub struct ClusterSecret(String);

impl ClusterSecret {
    pub fn new(secret: impl Into<String>) -> Self {
        ClusterSecret(secret.into())
    }

    pub(crate) fn expose(&self) -> &str {
        &self.0
    }

    /// Checks length and charset (visible ASCII, since it travels as an HTTP/2 header value) without revealing it.
    pub fn validate(&self) -> Result<(), TransportError> {
        let reason = if self.0.len() < SECRET_MIN_BYTES {
            format!("shorter than {SECRET_MIN_BYTES} bytes")
        } else if self.0.len() > METADATA_MAX_BYTES {
            format!("longer than {METADATA_MAX_BYTES} bytes")
        } else if !self.0.bytes().all(|b| b.is_ascii_graphic()) {
            "must be visible ASCII (no spaces or control characters)".to_string()
        } else {
            return Ok(());
        };
        Err(TransportError::InvalidConfig { field: "cluster_secret", reason })
    }
}

impl fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// Why a call was refused. Carries no secret material.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuthFailure {
    MissingClusterId,
    /// The peer's cluster id, truncated to 64 characters for logging.
    ClusterIdMismatch {
        got: String,
    },
    MissingSecret,
    WrongSecret,
}

impl AuthFailure {
    /// Which check failed, as it appears in logs.
    pub fn check(&self) -> &'static str {
        match self {
            AuthFailure::MissingClusterId => "cluster id missing",
            AuthFailure::ClusterIdMismatch { .. } => "cluster id mismatch",
            AuthFailure::MissingSecret => "cluster secret missing",
            AuthFailure::WrongSecret => "cluster secret wrong",
        }
    }
}

/// Attaches credentials to outgoing calls and checks them on incoming ones.
#[derive(Clone)]
pub struct ClusterAuth {
    cluster_id: String,
    id_value: AsciiMetadataValue,
    secret_value: AsciiMetadataValue,
    secret_digest: [u8; 32],
}

impl fmt::Debug for ClusterAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterAuth").field("cluster_id", &self.cluster_id).field("secret", &"***").finish()
    }
}

impl ClusterAuth {
    pub fn new(cluster_id: &str, secret: &ClusterSecret) -> Result<Self, TransportError> {
        validate_cluster_id(cluster_id)?;
        secret.validate()?;
        let id_value = AsciiMetadataValue::try_from(cluster_id).map_err(|_| TransportError::InvalidConfig {
            field: "cluster_id",
            reason: "not a valid metadata value".into(),
        })?;
        let mut secret_value = AsciiMetadataValue::try_from(secret.expose()).map_err(|_| {
            TransportError::InvalidConfig { field: "cluster_secret", reason: "not a valid metadata value".into() }
        })?;
        secret_value.set_sensitive(true);
        Ok(ClusterAuth {
            cluster_id: cluster_id.to_string(),
            id_value,
            secret_value,
            secret_digest: Sha256::digest(secret.expose().as_bytes()).into(),
        })
    }

    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    /// The secret, for a frame this crate writes (the relay's first); never for a log.
    pub(crate) fn secret(&self) -> &str {
        self.secret_value.to_str().unwrap_or_default()
    }

    /// Adds the cluster id and secret to an outgoing request's metadata.
    pub fn attach<T>(&self, req: &mut Request<T>) {
        let md = req.metadata_mut();
        md.insert(CLUSTER_ID_HEADER, self.id_value.clone());
        md.insert(CLUSTER_SECRET_HEADER, self.secret_value.clone());
    }

    /// Checks incoming metadata. The cluster id is compared first (it is not secret); the secret in constant time.
    pub fn check(&self, md: &MetadataMap) -> Result<(), AuthFailure> {
        self.check_values(
            md.get(CLUSTER_ID_HEADER).map(|v| v.as_bytes()),
            md.get(CLUSTER_SECRET_HEADER).map(|v| v.as_bytes()),
        )
    }

    /// [`ClusterAuth::check`] on the two values however they travelled (the relay carries them in its first frame).
    pub fn check_values(&self, id: Option<&[u8]>, secret: Option<&[u8]>) -> Result<(), AuthFailure> {
        let id = id.ok_or(AuthFailure::MissingClusterId)?;
        if id != self.cluster_id.as_bytes() {
            let got: String = String::from_utf8_lossy(id).chars().take(64).collect();
            return Err(AuthFailure::ClusterIdMismatch { got });
        }
        let secret = secret.ok_or(AuthFailure::MissingSecret)?;
        let digest: [u8; 32] = Sha256::digest(secret).into();
        if bool::from(digest.ct_eq(&self.secret_digest)) {
            Ok(())
        } else {
            Err(AuthFailure::WrongSecret)
        }
    }

    /// [`ClusterAuth::check`] for a server handler: logs a refusal with the peer address and the failed check, and
    /// turns it into `Unauthenticated`.
    pub fn check_request<T>(&self, req: &Request<T>) -> Result<(), Status> {
        self.check(req.metadata()).map_err(|failure| reject(req.remote_addr(), &self.cluster_id, &failure))
    }

    /// A tonic interceptor doing [`ClusterAuth::check_request`], for the gRPC services of the peer port (`Admin`):
    /// `AdminServer::with_interceptor(svc, auth.interceptor())`.
    pub fn interceptor(&self) -> impl FnMut(Request<()>) -> Result<Request<()>, Status> + Clone + Send + 'static {
        let auth = self.clone();
        move |req: Request<()>| auth.check_request(&req).map(|()| req)
    }
}

fn reject(peer: Option<SocketAddr>, ours: &str, failure: &AuthFailure) -> Status {
    let peer = peer.map_or_else(|| "unknown".to_string(), |a| a.to_string());
    match failure {
        AuthFailure::ClusterIdMismatch { got } => tracing::warn!(
            %peer, check = failure.check(), peer_cluster = ?got, our_cluster = ours,
            "rejected peer call: cluster id mismatch"
        ),
        _ => tracing::warn!(%peer, check = failure.check(), "rejected peer call: {}", failure.check()),
    }
    Status::unauthenticated(failure.check())
}

pub(crate) fn validate_cluster_id(cluster_id: &str) -> Result<(), TransportError> {
    let reason = if cluster_id.is_empty() {
        "must not be empty"
    } else if cluster_id.len() > METADATA_MAX_BYTES {
        "longer than 256 bytes"
    } else if !cluster_id.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b)) {
        "only ASCII letters, digits and - _ . : are allowed"
    } else {
        return Ok(());
    };
    Err(TransportError::InvalidConfig { field: "cluster_id", reason: reason.into() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth() -> ClusterAuth {
        ClusterAuth::new("c1", &ClusterSecret::new("0123456789abcdef-secret")).unwrap()
    }

    #[test]
    fn debug_never_shows_the_secret() {
        let s = ClusterSecret::new("0123456789abcdef-secret");
        assert_eq!(format!("{s:?}"), "***");
        let a = auth();
        let dbg = format!("{a:?}");
        assert!(!dbg.contains("0123456789abcdef"), "{dbg}");
        assert!(dbg.contains("***"));
        let mut req = Request::new(());
        a.attach(&mut req);
        assert!(!format!("{:?}", req.metadata()).contains("0123456789abcdef"), "metadata Debug shows the secret");
    }

    #[test]
    fn checks() {
        let a = auth();
        let mut req = Request::new(());
        a.attach(&mut req);
        assert_eq!(a.check(req.metadata()), Ok(()));

        let other = ClusterAuth::new("c1", &ClusterSecret::new("0123456789abcdef-secreT")).unwrap();
        assert_eq!(other.check(req.metadata()), Err(AuthFailure::WrongSecret));
        let other = ClusterAuth::new("c2", &ClusterSecret::new("0123456789abcdef-secret")).unwrap();
        assert_eq!(other.check(req.metadata()), Err(AuthFailure::ClusterIdMismatch { got: "c1".into() }));

        let mut md = MetadataMap::new();
        assert_eq!(a.check(&md), Err(AuthFailure::MissingClusterId));
        md.insert(CLUSTER_ID_HEADER, "c1".parse().unwrap());
        assert_eq!(a.check(&md), Err(AuthFailure::MissingSecret));
        md.insert(CLUSTER_SECRET_HEADER, "".parse().unwrap());
        assert_eq!(a.check(&md), Err(AuthFailure::WrongSecret));
    }

    #[test]
    fn config_validation() {
        assert!(ClusterAuth::new("c1", &ClusterSecret::new("short")).is_err());
        assert!(ClusterAuth::new("c1", &ClusterSecret::new("has a space in it, sixteen+")).is_err());
        assert!(ClusterAuth::new("", &ClusterSecret::new("0123456789abcdef")).is_err());
        assert!(ClusterAuth::new("bad\nid", &ClusterSecret::new("0123456789abcdef")).is_err());
        let err = ClusterAuth::new("c1", &ClusterSecret::new("tiny-secret")).unwrap_err().to_string();
        assert!(!err.contains("tiny-secret"), "{err}");
    }
}
