//! The names MCP tools get in front of the model: `<server>__<tool>`, only
//! `[A-Za-z0-9_-]`, at most 64 characters, collisions resolved deterministically. Pure.

/// Longest tool name the providers accept.
pub(crate) const MAX_NAME: usize = 64;

/// Replace everything outside `[A-Za-z0-9_-]` with `_`.
pub(crate) fn sanitise(part: &str) -> String {
    part.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect()
}

/// The exposed name of each `(server, tool)` pair, in the order given. The pairs are
/// sorted first, so the result does not depend on the order servers answered in: of two
/// pairs that map to the same name, the one that sorts first keeps it and the other gets
/// `_2` (`_3`, …), shortened to fit.
pub(crate) fn exposed_names(pairs: &[(String, String)]) -> Vec<String> {
    let mut order: Vec<usize> = (0..pairs.len()).collect();
    order.sort_by(|&a, &b| pairs[a].cmp(&pairs[b]));
    let mut taken = std::collections::HashSet::new();
    let mut names = vec![String::new(); pairs.len()];
    for i in order {
        let (server, tool) = &pairs[i];
        let base = cut(&format!("{}__{}", sanitise(server), sanitise(tool)), MAX_NAME);
        let mut name = base.clone();
        let mut n = 2;
        while taken.contains(&name) {
            let suffix = format!("_{n}");
            name = format!("{}{suffix}", cut(&base, MAX_NAME - suffix.len()));
            n += 1;
        }
        taken.insert(name.clone());
        names[i] = name;
    }
    names
}

/// The first `max` characters (the names are ASCII after `sanitise`).
fn cut(s: &str, max: usize) -> String {
    s.chars().take(max).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(s, t)| (s.to_string(), t.to_string())).collect()
    }

    #[test]
    fn names_are_server_double_underscore_tool_sanitised() {
        let names = exposed_names(&pairs(&[("git hub", "create.issue"), ("docs", "search-v2")]));
        assert_eq!(names, vec!["git_hub__create_issue", "docs__search-v2"]);
    }

    #[test]
    fn long_names_are_cut_to_64() {
        let long = "t".repeat(100);
        let names = exposed_names(&pairs(&[("srv", &long)]));
        assert_eq!(names[0].len(), MAX_NAME);
        assert!(names[0].starts_with("srv__ttt"));
    }

    #[test]
    fn collisions_are_resolved_the_same_way_whatever_the_order() {
        let a = pairs(&[("s", "a.b"), ("s", "a_b"), ("s", "a b")]);
        let mut b = a.clone();
        b.reverse();
        let na = exposed_names(&a);
        let nb = exposed_names(&b);
        // "a b" < "a.b" < "a_b": the first keeps the plain name.
        assert_eq!(na, vec!["s__a_b_2", "s__a_b_3", "s__a_b"]);
        let mut nb_rev = nb.clone();
        nb_rev.reverse();
        assert_eq!(na, nb_rev);
        // Long colliding names stay within the limit.
        let long1 = format!("{}!", "x".repeat(80));
        let long2 = format!("{}?", "x".repeat(80));
        let n = exposed_names(&pairs(&[("s", &long1), ("s", &long2)]));
        assert!(n.iter().all(|x| x.len() <= MAX_NAME), "{n:?}");
        assert_ne!(n[0], n[1]);
    }
}
