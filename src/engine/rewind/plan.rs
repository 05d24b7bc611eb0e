//! What a rewind does, decided without I/O: from how the workspace now differs from the
//! point chosen, which paths the later turns changed, and which the user changed since.

use std::collections::BTreeSet;

use serde::Serialize;

use super::git::{Change, ChangeKind};

/// What happens to one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Modified later: put back as it was.
    Revert,
    /// Deleted later: brought back.
    Recreate,
    /// Created later: removed.
    Remove,
}

impl Action {
    pub fn label(self) -> &'static str {
        match self {
            Action::Revert => "restore",
            Action::Recreate => "bring back",
            Action::Remove => "remove",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Step {
    pub path: String,
    pub action: Action,
}

/// The whole rewind of the code, before it is confirmed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Plan {
    pub steps: Vec<Step>,
    /// Paths the user changed since the point chosen: shown, and left as they are.
    pub kept: Vec<String>,
}

/// `differs`: the point chosen → now. `agent`: paths the turns since changed. `user`:
/// paths changed while no turn ran since. `include_user`: the user said to put theirs back too.
pub fn plan(differs: &[Change], agent: &BTreeSet<String>, user: &BTreeSet<String>, include_user: bool) -> Plan {
    let mut out = Plan::default();
    for change in differs {
        let theirs = user.contains(&change.path);
        if theirs && !include_user {
            out.kept.push(change.path.clone());
            continue;
        }
        if !(agent.contains(&change.path) || (theirs && include_user)) {
            continue;
        }
        // `differs` runs from the point to now: added since means remove it.
        let action = match change.kind {
            ChangeKind::Added => Action::Remove,
            ChangeKind::Deleted => Action::Recreate,
            ChangeKind::Modified => Action::Revert,
        };
        out.steps.push(Step { path: change.path.clone(), action });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn ch(path: &str, kind: ChangeKind) -> Change {
        Change { path: path.into(), kind, added: None, removed: None }
    }
    fn set(paths: &[&str]) -> BTreeSet<String> {
        paths.iter().map(|p| p.to_string()).collect()
    }

    #[test]
    fn later_turns_paths_go_back_and_the_users_are_kept() {
        let differs = vec![
            ch("a.txt", ChangeKind::Modified),
            ch("b.txt", ChangeKind::Modified),
            ch("c.txt", ChangeKind::Deleted),
            ch("d/e.txt", ChangeKind::Added),
            ch("f.txt", ChangeKind::Modified),
        ];
        let agent = set(&["a.txt", "b.txt", "c.txt", "d/e.txt"]);
        let user = set(&["f.txt"]);
        let p = plan(&differs, &agent, &user, false);
        assert_eq!(
            p.steps,
            vec![
                Step { path: "a.txt".into(), action: Action::Revert },
                Step { path: "b.txt".into(), action: Action::Revert },
                Step { path: "c.txt".into(), action: Action::Recreate },
                Step { path: "d/e.txt".into(), action: Action::Remove },
            ]
        );
        assert_eq!(p.kept, vec!["f.txt".to_string()]);
    }

    #[test]
    fn a_path_both_touched_is_kept_unless_the_user_says_otherwise() {
        let differs = vec![ch("a.txt", ChangeKind::Modified), ch("g.txt", ChangeKind::Added)];
        let both = set(&["a.txt"]);
        let kept = plan(&differs, &both, &both, false);
        assert_eq!((kept.steps.len(), kept.kept.clone()), (0, vec!["a.txt".to_string()]));
        let all = plan(&differs, &both, &set(&["a.txt", "g.txt"]), true);
        assert_eq!(all.steps.iter().map(|s| s.path.as_str()).collect::<Vec<_>>(), ["a.txt", "g.txt"]);
        assert!(all.kept.is_empty());
    }

    #[test]
    fn what_nobody_changed_since_is_untouched() {
        // A path that differs only by what happened before the point (not in either set).
        let p = plan(&[ch("old.txt", ChangeKind::Modified)], &set(&[]), &set(&[]), true);
        assert_eq!(p, Plan::default());
    }
}
