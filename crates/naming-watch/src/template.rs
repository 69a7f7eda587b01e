//! `{placeholder}` templates for file targets, parsed once at config time so that a typo fails `--check-config`
//! instead of the first failover.

use crate::MasterInfo;

/// Names a template may use.
pub const PLACEHOLDERS: [&str; 7] =
    ["cluster_id", "master_id", "master_version", "mariadb_host", "mariadb_port", "proxy_rw", "changed_at"];

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Field(&'static str),
}

/// A parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template(Vec<Piece>);

impl Template {
    /// Parses `text`: `{name}` is a placeholder, `{{` and `}}` are literal braces.
    pub fn parse(text: &str) -> Result<Template, String> {
        let mut pieces = Vec::new();
        let mut lit = String::new();
        let mut chars = text.char_indices().peekable();
        while let Some((at, c)) = chars.next() {
            match c {
                '{' if chars.peek().map(|p| p.1) == Some('{') => {
                    chars.next();
                    lit.push('{');
                }
                '}' if chars.peek().map(|p| p.1) == Some('}') => {
                    chars.next();
                    lit.push('}');
                }
                '{' => {
                    let rest = &text[at + 1..];
                    let end = rest.find('}').ok_or_else(|| format!("unclosed '{{' at byte {at} of the template"))?;
                    let name = &rest[..end];
                    let field = PLACEHOLDERS.iter().find(|p| **p == name).ok_or_else(|| {
                        format!("unknown placeholder {{{name}}} (known: {})", PLACEHOLDERS.join(", "))
                    })?;
                    if !lit.is_empty() {
                        pieces.push(Piece::Text(std::mem::take(&mut lit)));
                    }
                    pieces.push(Piece::Field(field));
                    for _ in 0..=end {
                        chars.next();
                    }
                }
                '}' => return Err(format!("lone '}}' at byte {at} of the template (write '}}}}')")),
                c => lit.push(c),
            }
        }
        if !lit.is_empty() {
            pieces.push(Piece::Text(lit));
        }
        Ok(Template(pieces))
    }

    pub fn render(&self, m: &MasterInfo) -> String {
        let mut out = String::new();
        for p in &self.0 {
            match p {
                Piece::Text(t) => out.push_str(t),
                Piece::Field(name) => out.push_str(&m.field(name)),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn master() -> MasterInfo {
        MasterInfo {
            cluster_id: "c1".into(),
            master_id: 2,
            master_version: 7,
            mariadb: "127.0.0.2:24010".into(),
            proxy_rw: "127.0.0.2:24014".into(),
            changed_at: "2026-01-02T03:04:05.678Z".into(),
        }
    }

    #[test]
    fn renders_every_placeholder() {
        let t = Template::parse(
            "{cluster_id} node={master_id} v={master_version} db={mariadb_host}:{mariadb_port} rw={proxy_rw} at={changed_at}\n",
        )
        .unwrap();
        assert_eq!(
            t.render(&master()),
            "c1 node=2 v=7 db=127.0.0.2:24010 rw=127.0.0.2:24014 at=2026-01-02T03:04:05.678Z\n"
        );
    }

    #[test]
    fn doubled_braces_are_literal() {
        let t = Template::parse("{{\"id\": {master_id}}}").unwrap();
        assert_eq!(t.render(&master()), "{\"id\": 2}");
    }

    #[test]
    fn typos_and_stray_braces_are_errors() {
        assert!(Template::parse("{master}").unwrap_err().contains("unknown placeholder {master}"));
        assert!(Template::parse("{master_id").unwrap_err().contains("unclosed"));
        assert!(Template::parse("a } b").unwrap_err().contains("lone"));
    }
}
