//! `mysql_native_password` (MariaDB `sql/password.c`, "4.1 authentication").
//!
//! The server keeps `stage2 = SHA1(SHA1(password))`. The client answers the 20-byte salt with
//! `token = SHA1(password) XOR SHA1(salt ++ stage2)`. The server recovers `candidate = token XOR SHA1(salt ++
//! stage2)` and accepts iff `SHA1(candidate) == stage2`. An empty password is an empty token.

use sha1::{Digest, Sha1};

/// Length of the salt ("scramble") and of a token.
pub const SCRAMBLE_LEN: usize = 20;

/// The stored form of a password: `None` for the empty password, else `SHA1(SHA1(password))`.
pub fn stage2(password: &str) -> Option<[u8; 20]> {
    if password.is_empty() {
        return None;
    }
    let stage1: [u8; 20] = Sha1::digest(password.as_bytes()).into();
    Some(Sha1::digest(stage1).into())
}

/// The token a client computes (used by tests and the fuzz corpus).
pub fn client_token(password: &str, salt: &[u8; SCRAMBLE_LEN]) -> Vec<u8> {
    if password.is_empty() {
        return Vec::new();
    }
    let stage1: [u8; 20] = Sha1::digest(password.as_bytes()).into();
    let stage2: [u8; 20] = Sha1::digest(stage1).into();
    let mix = Sha1::new().chain_update(salt).chain_update(stage2).finalize();
    stage1.iter().zip(mix.iter()).map(|(a, b)| a ^ b).collect()
}

/// Checks a client's token against the stored `stage2`.
pub fn verify(stage2: Option<&[u8; 20]>, salt: &[u8; SCRAMBLE_LEN], token: &[u8]) -> bool {
    let Some(stage2) = stage2 else { return token.is_empty() };
    if token.len() != SCRAMBLE_LEN {
        return false;
    }
    let mix = Sha1::new().chain_update(salt).chain_update(stage2).finalize();
    let candidate: Vec<u8> = token.iter().zip(mix.iter()).map(|(a, b)| a ^ b).collect();
    let check: [u8; 20] = Sha1::digest(&candidate).into();
    // Compare without an early exit, so timing does not tell how many bytes matched.
    check.iter().zip(stage2.iter()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn right_password_passes_wrong_fails() {
        let salt = *b"abcdefghij0123456789";
        let stored = stage2("replpw");
        assert!(verify(stored.as_ref(), &salt, &client_token("replpw", &salt)));
        assert!(!verify(stored.as_ref(), &salt, &client_token("wrong", &salt)));
        assert!(!verify(stored.as_ref(), &salt, &[]));
        assert!(!verify(stored.as_ref(), b"abcdefghij012345678X", &client_token("replpw", &salt)));
        assert!(verify(None, &salt, &[]));
        assert!(!verify(None, &salt, &client_token("x", &salt)));
    }

    #[test]
    fn stage2_matches_mariadb_password_function() {
        // SELECT PASSWORD('replpw') in MariaDB prints '*' + hex(SHA1(SHA1('replpw'))) upper-case.
        let hex: String = stage2("a").unwrap().iter().map(|b| format!("{b:02X}")).collect();
        // PASSWORD('a') = *667F407DE7C6AD07358FA38DAED7828A72014B4E (well-known value).
        assert_eq!(hex, "667F407DE7C6AD07358FA38DAED7828A72014B4E");
    }
}
