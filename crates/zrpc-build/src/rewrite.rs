//! Text edits on the generated files: tonic-build writes `tonic::...` paths, which resolve only
//! when the application depends on tonic directly; zrpc re-exports tonic, so they become
//! `::zrpc::tonic::...`. tonic-build has no option for its own path (only `codec_path`), hence
//! this small rewrite rather than a fork of the generator.

/// The files an include file (prost-build's `include_file`) pulls in.
pub(crate) fn included_files(listing: &str) -> Vec<&str> {
    listing
        .match_indices("include!(\"")
        .filter_map(|(i, m)| {
            let rest = &listing[i + m.len()..];
            rest.find('"').map(|end| &rest[..end])
        })
        .collect()
}

/// `code` with `tonic::` paths under `zrpc` and the descriptor registration appended.
pub(crate) fn finish(code: &str, zrpc: &str, descriptor_file: &str) -> String {
    let mut out = reroot_tonic(code, zrpc);
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&format!(
        "// Added by zrpc-build: tells zrpc's server which methods stream, and feeds reflection.\n\
         {zrpc}::codegen::inventory::submit! {{\n    \
         {zrpc}::codegen::LinkedDescriptorSet::new(include_bytes!(concat!(env!(\"OUT_DIR\"), \"/{descriptor_file}\")))\n\
         }}\n"
    ));
    out
}

/// Replaces each `tonic::` that starts a path (not `::tonic::`, not `x_tonic::`) with
/// `{zrpc}::tonic::`.
fn reroot_tonic(code: &str, zrpc: &str) -> String {
    const NEEDLE: &str = "tonic::";
    let mut out = String::with_capacity(code.len() + code.len() / 8);
    let mut last = 0;
    for (i, _) in code.match_indices(NEEDLE) {
        let before = code[..i].chars().next_back();
        let starts_path = !matches!(before, Some(c) if c.is_alphanumeric() || c == '_' || c == ':');
        if starts_path {
            out.push_str(&code[last..i]);
            out.push_str(zrpc);
            out.push_str("::tonic::");
            last = i + NEEDLE.len();
        }
    }
    out.push_str(&code[last..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reroots_only_path_starts() {
        let code = "use tonic::codegen::*;\nfn f(x: tonic::Status) -> ::tonic::Code {}\n\
                    type C = my_tonic::X; // tonic::Status";
        assert_eq!(
            reroot_tonic(code, "::zrpc"),
            "use ::zrpc::tonic::codegen::*;\nfn f(x: ::zrpc::tonic::Status) -> ::tonic::Code {}\n\
             type C = my_tonic::X; // ::zrpc::tonic::Status"
        );
    }

    #[test]
    fn lists_included_files() {
        let listing = "pub mod a {\n    include!(\"a.rs\");\n    pub mod b {\n        include!(\"a.b.rs\");\n    }\n}\n";
        assert_eq!(included_files(listing), ["a.rs", "a.b.rs"]);
    }

    #[test]
    fn appends_the_descriptor_registration() {
        let out = finish("struct X;", "::zrpc", "calc.zrpc-descriptor.bin");
        assert!(out.starts_with("struct X;\n"), "{out}");
        assert!(out.contains("::zrpc::codegen::inventory::submit!"), "{out}");
        assert!(out.contains("\"/calc.zrpc-descriptor.bin\""), "{out}");
    }
}
