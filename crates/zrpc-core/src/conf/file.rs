//! [`ConfFile`]: the file a config was loaded from, kept for errors found after loading.

use std::sync::Arc;

/// The file a config was loaded from, kept by the configs whose errors appear after loading
/// (a server's or a client's start: a TLS file that cannot be read, a log directory that cannot
/// be created), so that those name the file as load errors do. [`load`](super::load) sets it
/// through [`Validate::loaded_from`](super::Validate::loaded_from).
///
/// Not part of the config's value: it is neither read from nor written to a file, and any two
/// compare equal (a config loaded from a file equals the same config built in code).
#[derive(Debug, Clone, Default)]
pub struct ConfFile(Option<Arc<str>>);

impl ConfFile {
    /// Remembers `file` (an empty name is no file).
    pub fn set(&mut self, file: &str) {
        self.0 = (!file.is_empty()).then(|| Arc::from(file));
    }

    /// The file, when the config was loaded from one.
    pub fn get(&self) -> Option<&str> {
        self.0.as_deref()
    }
}

impl PartialEq for ConfFile {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for ConfFile {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_a_file_and_never_makes_configs_differ() {
        let mut f = ConfFile::default();
        assert_eq!(f.get(), None);
        f.set("etc/greet.yaml");
        assert_eq!(f.get(), Some("etc/greet.yaml"));
        assert_eq!(f, ConfFile::default());
        f.set("");
        assert_eq!(f.get(), None);
    }
}
