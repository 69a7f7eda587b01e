//! `mysql_native_password` (MariaDB `sql/password.c`, "4.1 authentication").
//!
//! The server keeps `stage2 = SHA1(SHA1(password))`. The client answers the 20-byte salt ("scramble") with
//! `token = SHA1(password) XOR SHA1(salt ++ stage2)`. The server recovers `candidate = token XOR SHA1(salt ++
//! stage2)` and accepts iff `SHA1(candidate) == stage2`. An empty password is an empty token.

use sha1::{Digest, Sha1};

/// The plugin's name, as greetings, logins and auth switches carry it.
pub const NATIVE_PASSWORD: &str = "mysql_native_password";

/// Length of a salt and of a token.
pub const SCRAMBLE_LEN: usize = 20;

/// The stored form of a password: `None` for the empty password, else `SHA1(SHA1(password))`.
pub fn stage2(password: &str) -> Option<[u8; 20]> {
    if password.is_empty() {
        return None;
    }
    let stage1: [u8; 20] = Sha1::digest(password.as_bytes()).into();
    Some(Sha1::digest(stage1).into())
}

/// The token a client sends for `password` and the server's `salt` (`scramble_411` in `sql/password.c`).
pub fn token(password: &[u8], salt: &[u8]) -> Vec<u8> {
    if password.is_empty() {
        return Vec::new();
    }
    let stage1: [u8; 20] = Sha1::digest(password).into();
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
        assert!(verify(stored.as_ref(), &salt, &token(b"replpw", &salt)));
        assert!(!verify(stored.as_ref(), &salt, &token(b"wrong", &salt)));
        assert!(!verify(stored.as_ref(), &salt, &[]));
        assert!(!verify(stored.as_ref(), b"abcdefghij012345678X", &token(b"replpw", &salt)));
        assert!(verify(None, &salt, &[]));
        assert!(!verify(None, &salt, &token(b"x", &salt)));
    }

    #[test]
    fn token_known_vector() {
        // Python hashlib: s1=sha1(b"password"); s2=sha1(s1); x=sha1(b"\0"*20+s2); bytes(a^b for a,b in zip(s1,x))
        let t = token(b"password", &[0u8; 20]);
        assert_eq!(
            t.iter().map(|b| format!("{b:02x}")).collect::<String>(),
            "072087d16fdfabc55b1644bb904205c60d505fcf"
        );
        assert!(token(b"", &[0u8; 20]).is_empty());
    }

    #[test]
    fn stage2_matches_mariadb_password_function() {
        // PASSWORD('a') = *667F407DE7C6AD07358FA38DAED7828A72014B4E (well-known value).
        let hex: String = stage2("a").unwrap().iter().map(|b| format!("{b:02X}")).collect();
        assert_eq!(hex, "667F407DE7C6AD07358FA38DAED7828A72014B4E");
    }
}
