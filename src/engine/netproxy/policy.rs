//! Which host a job's request may reach (DESIGN §6b): a pure decision on the host name and
//! what the user listed, allowed this session, or what a process of the session serves on
//! loopback. No I/O; the proxy brings the facts.

use std::collections::HashSet;

/// A host as the proxy compares it: lowercase, no trailing dot, no IPv6 brackets.
pub(crate) fn normalise_host(host: &str) -> String {
    let h = host.trim().trim_end_matches('.');
    let h = h.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(h);
    h.to_ascii_lowercase()
}

/// Does `pattern` (an exact name, or `*.suffix` for every name below `suffix`) name `host`?
/// `*.example.com` matches `a.example.com` and `a.b.example.com`, not `example.com`.
pub(crate) fn matches(pattern: &str, host: &str) -> bool {
    let p = normalise_host(pattern);
    match p.strip_prefix("*.") {
        Some(suffix) => {
            host.len() > suffix.len() + 1 && host.ends_with(suffix) && {
                let cut = host.len() - suffix.len();
                host.as_bytes()[cut - 1] == b'.'
            }
        }
        None => p == host,
    }
}

/// Is `host` loopback by name or address (the user's own services live there)?
pub(crate) fn is_loopback(host: &str) -> bool {
    host == "localhost"
        || host.ends_with(".localhost")
        || host.parse::<std::net::IpAddr>().is_ok_and(|ip| match ip {
            std::net::IpAddr::V4(v4) => v4.is_loopback(),
            std::net::IpAddr::V6(v6) => v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
        })
}

/// What the lists say about a host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Rule {
    /// Let it through without asking; why (for `/network` and the log).
    Allow(Why),
    /// Refuse without asking: the `network_deny` pattern that matched.
    Deny(String),
    /// Ask the user.
    Ask,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Why {
    Listed,
    Session,
    /// A loopback port a process of this session's sandboxed jobs listens on.
    OwnServer,
}

/// The facts of one request.
pub(crate) struct Facts<'a> {
    /// Normalised ([`normalise_host`]).
    pub(crate) host: &'a str,
    pub(crate) allow: &'a [String],
    pub(crate) deny: &'a [String],
    /// Hosts the user allowed "this session" (or "always", until the config is reread).
    pub(crate) session: &'a HashSet<String>,
    /// The host is loopback and a process of the session's jobs listens on the port.
    pub(crate) own_server: bool,
}

/// Deny first (a listed deny wins over everything), then the session's own servers, the
/// allow list, this session's answers; the rest asks.
pub(crate) fn decide(f: &Facts<'_>) -> Rule {
    if let Some(p) = f.deny.iter().find(|p| matches(p, f.host)) {
        return Rule::Deny(p.clone());
    }
    if f.own_server {
        return Rule::Allow(Why::OwnServer);
    }
    if f.allow.iter().any(|p| matches(p, f.host)) {
        return Rule::Allow(Why::Listed);
    }
    if f.session.contains(f.host) {
        return Rule::Allow(Why::Session);
    }
    Rule::Ask
}

/// Does the host say where it goes — an address, or `localhost` itself? Then the user saw
/// that when they listed it or answered for it. (`app.localhost` is a name like any other
/// here, so that a `*.localhost` glob does not open every loopback port.)
pub(crate) fn names_its_address(host: &str) -> bool {
    host == "localhost" || host.parse::<std::net::IpAddr>().is_ok()
}

/// A name that resolved to this machine (loopback, the unspecified address, or one of its
/// own addresses): may it go there without asking? Only when the name says so itself, the
/// user listed this exact name (a `*.suffix` glob does not count: whoever runs the suffix's
/// DNS can point a name at 127.0.0.1 and reach the user's own services), or allowed it for
/// this session knowing where it resolves.
pub(crate) fn local_allowed(host: &str, allow: &[String], session_local: &HashSet<String>) -> bool {
    names_its_address(host)
        || allow.iter().any(|p| !normalise_host(p).starts_with("*.") && matches(p, host))
        || session_local.contains(host)
}

/// Split a CONNECT target or URL authority into (host, port); `default` when no port.
pub(crate) fn split_authority(authority: &str, default: u16) -> Option<(String, u16)> {
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (h, tail) = rest.split_once(']')?;
        let port = match tail.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None if tail.is_empty() => default,
            None => return None,
        };
        (h.to_string(), port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), p.parse().ok()?),
            None => (authority.to_string(), default),
        }
    };
    let host = normalise_host(&host);
    let valid =
        !host.is_empty() && host.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':'));
    (valid && port != 0).then_some((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn patterns_match_exact_names_and_subdomains_of_a_suffix() {
        let rows = [
            ("registry.npmjs.org", "registry.npmjs.org", true),
            ("Registry.NPMJS.org.", "registry.npmjs.org", true),
            ("registry.npmjs.org", "evil-registry.npmjs.org", false),
            ("*.github.com", "api.github.com", true),
            ("*.github.com", "a.b.github.com", true),
            ("*.github.com", "github.com", false),
            ("*.github.com", "evilgithub.com", false),
            ("*.github.com", "github.com.evil.io", false),
            ("127.0.0.1", "127.0.0.1", true),
            ("[::1]", "::1", true),
        ];
        for (pattern, host, want) in rows {
            assert_eq!(matches(pattern, host), want, "{pattern} vs {host}");
        }
    }

    #[test]
    fn deny_wins_then_own_servers_then_lists_then_the_session_and_the_rest_asks() {
        let allow = vec!["*.crates.io".to_string(), "pypi.org".to_string()];
        let deny = vec!["evil.crates.io".to_string()];
        let session: HashSet<String> = ["example.com".to_string()].into();
        let f = |host: &'static str, own_server: bool| Facts {
            host,
            allow: &allow,
            deny: &deny,
            session: &session,
            own_server,
        };
        assert_eq!(decide(&f("static.crates.io", false)), Rule::Allow(Why::Listed));
        assert_eq!(decide(&f("evil.crates.io", false)), Rule::Deny("evil.crates.io".into()));
        assert_eq!(decide(&f("evil.crates.io", true)), Rule::Deny("evil.crates.io".into()));
        assert_eq!(decide(&f("example.com", false)), Rule::Allow(Why::Session));
        assert_eq!(decide(&f("127.0.0.1", true)), Rule::Allow(Why::OwnServer));
        assert_eq!(decide(&f("127.0.0.1", false)), Rule::Ask);
        assert_eq!(decide(&f("somewhere.example", false)), Rule::Ask);
    }

    #[test]
    fn a_name_that_resolves_to_this_machine_passes_only_when_named_exactly() {
        let allow = vec!["*.example".to_string(), "dev.internal".to_string()];
        let mut session = HashSet::new();
        assert!(!local_allowed("api.example", &allow, &session), "a glob reached loopback");
        assert!(local_allowed("dev.internal", &allow, &session));
        assert!(local_allowed("127.0.0.1", &allow, &session) && local_allowed("::1", &allow, &session));
        assert!(local_allowed("localhost", &allow, &session) && local_allowed("10.1.2.3", &allow, &session));
        assert!(!local_allowed("app.localhost", &["*.localhost".to_string()], &session));
        assert!(local_allowed("app.localhost", &["app.localhost".to_string()], &session));
        session.insert("api.example".to_string());
        assert!(local_allowed("api.example", &allow, &session));
        assert!(!local_allowed("other.example", &allow, &session));
    }

    #[test]
    fn authorities_split_into_host_and_port() {
        let rows = [
            ("example.com:443", Some(("example.com".to_string(), 443))),
            ("Example.COM", Some(("example.com".to_string(), 80))),
            ("[::1]:8080", Some(("::1".to_string(), 8080))),
            ("[::1]", Some(("::1".to_string(), 80))),
            ("user:pw@host.io:81", Some(("host.io".to_string(), 81))),
            ("host:0", None),
            ("host:x", None),
            ("", None),
            ("a b:80", None),
            ("[::1]x", None),
        ];
        for (authority, want) in rows {
            assert_eq!(split_authority(authority, 80), want, "{authority}");
        }
        assert!(is_loopback("localhost") && is_loopback("127.0.0.2") && is_loopback("::1"));
        assert!(is_loopback("::ffff:127.0.0.1") && !is_loopback("10.0.0.1") && !is_loopback("example.com"));
    }
}
