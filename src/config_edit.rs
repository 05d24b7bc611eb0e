//! Settings the program writes back (`/busy`, the approvals allowlist) are edited in
//! place with `toml_edit`, so the user's comments and layout survive.

use std::path::Path;

use toml_edit::DocumentMut;

/// Load `path` (or an empty document), apply `change`, write it back atomically.
pub(crate) fn edit(path: &Path, change: impl FnOnce(&mut DocumentMut) -> anyhow::Result<()>) -> anyhow::Result<()> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e.into()),
    };
    let mut doc: DocumentMut = text.parse()?;
    change(&mut doc)?;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let tmp = path.with_extension("toml.tmp");
    std::fs::write(&tmp, doc.to_string())?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

/// Set `[section] key = value` (a string), keeping everything else.
pub(crate) fn set_string(path: &Path, section: &str, key: &str, value: &str) -> anyhow::Result<()> {
    edit(path, |doc| {
        let table = doc.entry(section).or_insert(toml_edit::table());
        let table = table.as_table_mut().ok_or_else(|| anyhow::anyhow!("[{section}] is not a table"))?;
        table[key] = toml_edit::value(value);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edits_keep_comments() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(&path, "# my settings\n[agent]\n# keep me\nmax_iterations = 9\n").unwrap();
        set_string(&path, "agent", "busy_input_mode", "steer").unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("# my settings"));
        assert!(text.contains("# keep me"));
        assert!(text.contains("busy_input_mode = \"steer\""));
        let config = crate::config::Config::load(&path).unwrap();
        assert_eq!(config.agent.busy_input_mode, crate::protocol::BusyMode::Steer);
        assert_eq!(config.agent.max_iterations, 9);
    }
}
