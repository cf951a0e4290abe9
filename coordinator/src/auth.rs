//! Who may do what. Every request carries a bearer token; the store keeps only its SHA-256, with
//! a name and a role. Roles:
//! - `admin`: everything;
//! - `viewer`: get, list and watch everything (dashboards, auditors, CI);
//! - `node:<name>`: reserved for enrolled node agents (see the agent's enrollment).

use rand::RngCore;
use sha2::{Digest, Sha256};

/// What a request does, in Kubernetes' verb names (they appear in 403 messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
}

impl Verb {
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
        }
    }
    pub fn is_read(self) -> bool {
        matches!(self, Verb::Get | Verb::List | Verb::Watch)
    }
}

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub name: String,
    pub role: Role,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    Admin,
    Viewer,
    Node(String),
}

#[derive(Debug, thiserror::Error)]
#[error("unknown role {0:?}: want admin, viewer or node:<name>")]
pub struct RoleError(String);

impl std::str::FromStr for Role {
    type Err = RoleError;
    fn from_str(s: &str) -> Result<Self, RoleError> {
        match s {
            "admin" => Ok(Role::Admin),
            "viewer" => Ok(Role::Viewer),
            _ => match s.strip_prefix("node:") {
                Some(n) if !n.is_empty() => Ok(Role::Node(n.to_string())),
                _ => Err(RoleError(s.to_string())),
            },
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Role::Admin => f.write_str("admin"),
            Role::Viewer => f.write_str("viewer"),
            Role::Node(n) => write!(f, "node:{n}"),
        }
    }
}

/// A new random token. 256 bits, URL-safe, with a prefix that makes leaked tokens greppable.
pub fn generate_token() -> String {
    let mut b = [0u8; 32];
    rand::rng().fill_bytes(&mut b);
    format!("aloft_{}", hex::encode(b))
}

/// What the store keeps instead of the token.
pub fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// The request a decision is about.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub verb: Verb,
    /// `ResourceType::store_key()`.
    pub resource: &'a str,
    pub name: Option<&'a str>,
    pub subresource: Option<&'a str>,
}

/// Decide. Node roles get nothing here yet: the agent's enrollment issue defines their rights
/// (own Node, own rendered configs) next to the code that needs them.
pub fn allowed(who: &Identity, req: &Request<'_>) -> bool {
    match &who.role {
        Role::Admin => true,
        Role::Viewer => req.verb.is_read(),
        Role::Node(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_parse_and_decide() {
        assert_eq!("admin".parse::<Role>().unwrap(), Role::Admin);
        assert_eq!("node:n1".parse::<Role>().unwrap(), Role::Node("n1".into()));
        assert!("node:".parse::<Role>().is_err());
        assert!("root".parse::<Role>().is_err());
        let viewer = Identity { name: "v".into(), role: Role::Viewer };
        let get = Request { verb: Verb::Get, resource: "/nodes", name: Some("a"), subresource: None };
        let del = Request { verb: Verb::Delete, ..get };
        assert!(allowed(&viewer, &get));
        assert!(!allowed(&viewer, &del));
        let t = generate_token();
        assert!(t.starts_with("aloft_") && t.len() == 70);
        assert_ne!(token_hash(&t), t);
        assert_ne!(generate_token(), t);
    }
}
