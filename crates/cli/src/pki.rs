//! The certificates `cluster up` makes for a cluster: one CA, a certificate per member naming it
//! (`node-<id>.paxsql`, the identity its peers verify, plus the address it listens on), one for operators'
//! tools, and per node a server certificate for its client ports (`node-<id>-clients`: the node's client address
//! and `localhost`, server use only, so a key on the client-facing side can never speak as a member). Private keys are written 0600 from their creation; the CA key stays in the cluster directory so that a
//! node added later can be certified by the same CA.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use paxsql_peer_transport::identity::{member_name, OPERATOR_NAME};
use paxsql_peer_transport::TlsConfig;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

use crate::secret_file::write_secret;

/// Years a member or operator certificate stays valid; the CA lives twice as long.
const LEAF_YEARS: i32 = 5;

/// Where the cluster's TLS files are, in `dir`.
pub struct ClusterPki {
    dir: PathBuf,
}

impl ClusterPki {
    pub fn at(dir: &Path) -> ClusterPki {
        ClusterPki { dir: dir.to_path_buf() }
    }

    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// The certificate and key of `holder` (`node-<id>`, `node-<id>-clients` or `operator`), trusting the cluster CA.
    pub fn tls(&self, holder: &str) -> TlsConfig {
        TlsConfig {
            cert: self.dir.join(format!("{holder}.pem")),
            key: self.dir.join(format!("{holder}.key")),
            ca: self.ca(),
        }
    }

    /// Node `id`'s member certificate and its client ports' certificate.
    pub fn node(&self, id: u64) -> (TlsConfig, TlsConfig) {
        (self.tls(&member_holder(id)), self.tls(&client_holder(id)))
    }

    /// Creates the CA and the certificates of `members` (`(id, address the node listens on)`) and of the operator.
    pub fn create(&self, cluster_id: &str, members: &[(u64, String)]) -> anyhow::Result<()> {
        let mut ca_params = ca_params(cluster_id);
        validity(&mut ca_params, 2 * LEAF_YEARS)?;
        let ca_key = KeyPair::generate()?;
        write_secret(&self.dir.join("ca.key"), &ca_key.serialize_pem())?;
        let ca = CertifiedIssuer::self_signed(ca_params, ca_key)?;
        std::fs::write(self.ca(), ca.pem()).with_context(|| format!("cannot write {}", self.ca().display()))?;
        for (id, address) in members {
            self.issue_member(&ca, *id, address)?;
        }
        self.issue(&ca, "operator", vec![OPERATOR_NAME.into()])
    }

    /// Certifies node `id`, listening on `address`, with the cluster's CA (kept in this directory): its member
    /// certificate and its client-port certificate, for a node added after `cluster up`.
    pub fn add_member(&self, cluster_id: &str, id: u64, address: &str) -> anyhow::Result<()> {
        let key_path = self.dir.join("ca.key");
        let pem = std::fs::read_to_string(&key_path).with_context(|| format!("cannot read {}", key_path.display()))?;
        let ca_key = KeyPair::from_pem(&pem).with_context(|| format!("{} holds no usable key", key_path.display()))?;
        // The CA's name and key identify it; a certificate signed with them chains to ca.pem.
        let ca = Issuer::new(ca_params(cluster_id), ca_key);
        self.issue_member(&ca, id, address)
    }

    fn issue_member(&self, ca: &Issuer<'_, KeyPair>, id: u64, address: &str) -> anyhow::Result<()> {
        self.issue(ca, &member_holder(id), vec![member_name(id), address.to_string(), "localhost".into()])?;
        self.issue(ca, &client_holder(id), vec![address.to_string(), "localhost".into()])
    }

    fn issue(&self, ca: &Issuer<'_, KeyPair>, holder: &str, names: Vec<String>) -> anyhow::Result<()> {
        let mut params = CertificateParams::new(names.clone())?;
        params.distinguished_name = name(&names[0]);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        // A member is server (its peer port) and client (its links to the others); the operator only client.
        params.extended_key_usages = if holder == "operator" {
            vec![ExtendedKeyUsagePurpose::ClientAuth]
        } else if holder.ends_with("-clients") {
            vec![ExtendedKeyUsagePurpose::ServerAuth]
        } else {
            vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth]
        };
        validity(&mut params, LEAF_YEARS)?;
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, ca)?;
        let tls = self.tls(holder);
        write_secret(&tls.key, &key.serialize_pem())?;
        std::fs::write(&tls.cert, cert.pem()).with_context(|| format!("cannot write {}", tls.cert.display()))?;
        Ok(())
    }
}

/// The CA's own parameters, the same at creation and whenever a member is added later.
fn ca_params(cluster_id: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.distinguished_name = name(&format!("paxsql cluster CA {cluster_id}"));
    params
}

/// Valid from the start of last year (a node whose clock runs behind still accepts its peers) for `years`.
fn validity(params: &mut CertificateParams, years: i32) -> anyhow::Result<()> {
    let this_year = 1970 + (SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs() / 31_556_952) as i32;
    params.not_before = rcgen::date_time_ymd(this_year - 1, 1, 1);
    params.not_after = rcgen::date_time_ymd(this_year + years, 1, 1);
    Ok(())
}

/// The holder name of node `id`'s member certificate.
fn member_holder(id: u64) -> String {
    format!("node-{id}")
}

/// The holder name of node `id`'s client-port certificate.
pub fn client_holder(id: u64) -> String {
    format!("node-{id}-clients")
}

fn name(common_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    dn
}
