//! What paxsql's endpoints need of SQL text itself: `LIKE` patterns, for the `SHOW ... LIKE 'pattern'` that
//! replicas and operators send to the replication server and the admin port.

/// SQL LIKE (case-insensitive), `%` and `_` wildcards, `\` escape. Dynamic programming over (pattern, text)
/// positions, so a hostile pattern of many `%` costs O(pattern × text), not exponential time.
pub fn like(pattern: &str, text: &str) -> bool {
    // Pattern tokens: None = '%', Some(None) = '_', Some(Some(c)) = literal c.
    let mut tokens: Vec<Option<Option<u8>>> = Vec::new();
    let mut p = pattern.bytes();
    while let Some(c) = p.next() {
        tokens.push(match c {
            b'%' => None,
            b'_' => Some(None),
            b'\\' => Some(Some(p.next().unwrap_or(b'\\'))),
            c => Some(Some(c)),
        });
    }
    let t = text.as_bytes();
    // matches[j]: the tokens so far match t[..j].
    let mut matches = vec![false; t.len() + 1];
    matches[0] = true;
    for token in tokens {
        let mut next = vec![false; t.len() + 1];
        for j in 0..=t.len() {
            next[j] = match token {
                None => matches[j] || (j > 0 && next[j - 1]),
                Some(None) => j > 0 && matches[j - 1],
                Some(Some(c)) => j > 0 && matches[j - 1] && t[j - 1].eq_ignore_ascii_case(&c),
            };
        }
        matches = next;
    }
    matches[t.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_matches_sql_semantics() {
        assert!(like("SERVER_ID", "server_id"));
        assert!(like("rpl_semi%", "rpl_semi_sync_master_enabled"));
        assert!(like("%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%x", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaax"));
        assert!(!like("%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%x", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaay"));
        assert!(like("server\\_id", "server_id"));
        assert!(!like("server\\_id", "serverxid"));
    }
}
