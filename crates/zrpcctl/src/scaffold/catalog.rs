//! The service's proto and every file it imports: where each import is found, which protobuf
//! packages they declare, and the Rust path of a proto type inside the generated crate.
//!
//! prost-build generates one Rust file per package (`acme.common.rs`) and names types of another
//! package relative to its own (`super::common::Money`), so the crate's `pb` module must mirror
//! the package tree whenever the service imports another package. Types of the service's own
//! package stay reachable as `pb::Name`.
//!
//! `google/protobuf/*.proto` are never copied: protoc ships them and prost maps their types to
//! prost-types (re-exported by zrpc) or to Rust types (`Empty` is `()`).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Component, Path, PathBuf};

use crate::proto::{self, Proto, camel_ident, snake_ident};
use crate::{Result, fail};

/// Where the generated code finds prost-types (`Timestamp`, `Duration`, `Any`, ...): the
/// facade's public re-export, the path zrpc-build points prost at too.
pub(crate) const PROST_TYPES: &str = "zrpc::prost_types";

/// A file imported by the service's proto (directly or not).
#[derive(Debug)]
pub(crate) struct Imported {
    /// As written in the `import` (`common/money.proto`): also its place under `proto/`.
    pub(crate) path: String,
    pub(crate) text: String,
    pub(crate) proto: Proto,
}

/// The service's proto and its imports.
#[derive(Debug)]
pub(crate) struct Catalog {
    pub(crate) main: Proto,
    pub(crate) imports: Vec<Imported>,
}

/// An RPC's message type that tonic-prost-build cannot use: prost maps these wrappers to bare
/// scalars, and tonic then names them as paths (`super::bool`), which do not compile.
const SCALAR_WRAPPERS: [&str; 7] = [
    "BoolValue",
    "DoubleValue",
    "FloatValue",
    "Int32Value",
    "Int64Value",
    "UInt32Value",
    "UInt64Value",
];

impl Catalog {
    /// A catalog of one file with no imports followed.
    #[cfg(test)]
    pub(crate) fn single(main: Proto) -> Self {
        Catalog {
            main,
            imports: Vec::new(),
        }
    }

    /// Reads every file `main` imports (transitively), searching `includes` in order, as protoc
    /// does with `-I`. `main_name` names the service's file in messages.
    pub(crate) fn load(main: Proto, main_name: &str, includes: &[PathBuf]) -> Result<Self> {
        let mut imports: Vec<Imported> = Vec::new();
        let mut seen = BTreeSet::new();
        let mut queue: VecDeque<(String, String)> = main
            .imports
            .iter()
            .map(|i| (main_name.to_owned(), i.clone()))
            .collect();
        while let Some((importer, path)) = queue.pop_front() {
            if path.starts_with("google/protobuf/") || !seen.insert(path.clone()) {
                continue;
            }
            if !is_relative_inside(&path) {
                return Err(fail(format!(
                    "{importer}: import \"{path}\" must be a relative path without `..` (protoc resolves it against -I directories)"
                )));
            }
            if path == main_name {
                return Err(fail(format!(
                    "{importer}: imports \"{path}\", the name the service's own proto takes under proto/; rename one of them"
                )));
            }
            let Some(found) = includes.iter().map(|d| d.join(&path)).find(|p| p.is_file()) else {
                let dirs: Vec<String> = includes.iter().map(|d| d.display().to_string()).collect();
                return Err(fail(format!(
                    "{importer}: cannot find import \"{path}\" (looked in {}); pass the directory it is relative to with -I <dir>, as with protoc",
                    dirs.join(", ")
                )));
            };
            let text = std::fs::read_to_string(&found)
                .map_err(|e| fail(format!("cannot read {}: {e}", found.display())))?;
            let parsed =
                proto::parse(&text).map_err(|e| fail(format!("{}: {e}", found.display())))?;
            queue.extend(parsed.imports.iter().map(|i| (path.clone(), i.clone())));
            imports.push(Imported {
                path,
                text,
                proto: parsed,
            });
        }
        Ok(Catalog { main, imports })
    }

    fn files(&self) -> impl Iterator<Item = &Proto> {
        std::iter::once(&self.main).chain(self.imports.iter().map(|i| &i.proto))
    }

    /// Every package prost generates a file for, with its top-level type names.
    fn packages(&self) -> BTreeMap<&str, BTreeSet<&str>> {
        let mut out: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for f in self.files().filter(|f| f.defines_code()) {
            out.entry(f.package.as_str())
                .or_default()
                .extend(f.types.iter().map(String::as_str));
        }
        out
    }

    /// Whether `pb` must mirror the package tree: some imported package other than the
    /// service's own has generated code.
    pub(crate) fn needs_tree(&self) -> bool {
        self.packages().keys().any(|p| *p != self.main.package)
    }

    /// The Rust path of proto type `ty` (as written in an RPC of the service's file), from
    /// inside the generated crate.
    ///
    /// # Errors
    ///
    /// The wrappers prost maps to bare scalars (`google.protobuf.BoolValue`, ...), which tonic
    /// cannot take as an RPC's message.
    pub(crate) fn rust_type(&self, ty: &str) -> Result<String> {
        if let Some(wkt) = ty.strip_prefix("google.protobuf.") {
            // prost-build's `ExternPaths` defaults, under zrpc's re-export of prost-types.
            let mapped = match wkt {
                "Empty" => "()".to_owned(),
                "BytesValue" => "Vec<u8>".to_owned(),
                "StringValue" => "String".to_owned(),
                w if SCALAR_WRAPPERS.contains(&w) => {
                    return Err(fail(format!(
                        "an rpc takes or returns google.protobuf.{w} directly, which tonic cannot generate code for (prost maps it to a bare scalar); wrap the value in a message of your own"
                    )));
                }
                other => format!("{PROST_TYPES}::{other}"),
            };
            return Ok(mapped);
        }
        let packages = self.packages();
        let own = self.main.package.as_str();
        match resolve(&packages, own, ty) {
            Some((package, rest)) => {
                let names: Vec<&str> = rest.split('.').collect();
                Ok(self.path_of(&packages, package, &names))
            }
            // Not a type this reader saw (protoc will say if it does not exist): the old
            // guess, a type of the service's own package.
            None => {
                let local = if own.is_empty() {
                    ty
                } else {
                    ty.strip_prefix(&format!("{own}.")).unwrap_or(ty)
                };
                let names: Vec<&str> = local.split('.').collect();
                Ok(self.path_of(&packages, own, &names))
            }
        }
    }

    fn path_of(
        &self,
        packages: &BTreeMap<&str, BTreeSet<&str>>,
        package: &str,
        names: &[&str],
    ) -> String {
        let (last, outer) = names.split_last().unwrap_or((&"", &[]));
        let mut path = String::from("pb::");
        let roots: BTreeSet<String> = packages
            .keys()
            .filter_map(|p| p.split('.').next())
            .filter(|p| !p.is_empty())
            .map(snake_ident)
            .collect();
        let shadowed = self.needs_tree()
            && package == self.main.package
            && outer
                .first()
                .is_some_and(|o| roots.contains(&snake_ident(o)));
        if package != self.main.package || shadowed {
            for segment in module_path(package) {
                path.push_str(&segment);
                path.push_str("::");
            }
        }
        for o in outer {
            path.push_str(&snake_ident(o));
            path.push_str("::");
        }
        path.push_str(&camel_ident(last));
        path
    }

    /// `src/pb.rs`: the code zrpc-build generated, in modules that mirror the package tree when
    /// another package is imported. Its lints are relaxed: generated items have no docs, and
    /// tonic names a stream type after the RPC as written (`rpc watchAll` -> `watchAllStream`).
    pub(crate) fn pb_rs(&self, proto_name: &str) -> String {
        let mut out = format!(
            "//! Messages, clients and servers generated from proto/{proto_name} and the files it\n\
             //! imports (by zrpc-build, in build.rs). Generated by zrpcctl: `zrpcctl proto` rewrites it.\n\n\
             #![allow(missing_docs, non_camel_case_types, clippy::all)]\n\n"
        );
        if !self.needs_tree() {
            out.push_str(&include(&self.main.package));
            return out;
        }
        let mut tree = Tree::default();
        for package in self.packages().keys() {
            let mut node = &mut tree;
            for segment in module_path(package) {
                node = node.children.entry(segment).or_default();
            }
            node.package = Some((*package).to_owned());
        }
        if !self.main.package.is_empty() {
            out.push_str(&format!(
                "pub use self::{}::*;\n\n",
                module_path(&self.main.package).join("::")
            ));
        }
        tree.render(&mut out, 0);
        out
    }
}

/// `common/money.proto` yes; `/etc/x.proto`, `../x.proto` no.
fn is_relative_inside(path: &str) -> bool {
    Path::new(path)
        .components()
        .all(|c| matches!(c, Component::Normal(_)))
}

/// prost's module path of a package: each segment snake-cased (`Acme.V1` -> `acme`, `v1`).
fn module_path(package: &str) -> Vec<String> {
    package
        .split('.')
        .filter(|s| !s.is_empty())
        .map(snake_ident)
        .collect()
}

/// `zrpc::include_proto!("<file>");` for a package: prost's file name is the module path
/// joined with dots (`_` for no package).
fn include(package: &str) -> String {
    let path = module_path(package);
    let file = if path.is_empty() {
        "_".to_owned()
    } else {
        path.join(".")
    };
    format!("zrpc::include_proto!(\"{file}\");\n")
}

/// The service's type `ty` (relative to package `own`, or fully qualified), as a package and
/// the dotted name inside it, following protobuf's scoping: the innermost enclosing package
/// first.
fn resolve<'a>(
    packages: &BTreeMap<&'a str, BTreeSet<&str>>,
    own: &str,
    ty: &str,
) -> Option<(&'a str, String)> {
    let mut scope = Some(own);
    while let Some(s) = scope {
        let full = if s.is_empty() {
            ty.to_owned()
        } else {
            format!("{s}.{ty}")
        };
        // The longest package that is a prefix of `full` and declares its next name.
        let hit = packages
            .iter()
            .filter_map(|(package, types)| {
                let rest = if package.is_empty() {
                    Some(full.as_str())
                } else {
                    full.strip_prefix(*package)?.strip_prefix('.')
                };
                let rest = rest?;
                let first = rest.split('.').next()?;
                types.contains(first).then(|| (*package, rest.to_owned()))
            })
            .max_by_key(|(package, _)| package.len());
        if hit.is_some() {
            return hit;
        }
        scope = match s.rfind('.') {
            Some(i) => Some(&s[..i]),
            None if !s.is_empty() => Some(""),
            None => None,
        };
    }
    None
}

/// Nested modules of `pb` mirroring the packages.
#[derive(Debug, Default)]
struct Tree {
    package: Option<String>,
    children: BTreeMap<String, Tree>,
}

impl Tree {
    fn render(&self, out: &mut String, depth: usize) {
        let pad = "    ".repeat(depth);
        if let Some(p) = &self.package {
            out.push_str(&pad);
            out.push_str(&include(p));
        }
        for (i, (name, child)) in self.children.iter().enumerate() {
            if i > 0 || self.package.is_some() {
                out.push('\n');
            }
            out.push_str(&format!("{pad}pub mod {name} {{\n"));
            child.render(out, depth + 1);
            out.push_str(&format!("{pad}}}\n"));
        }
    }
}
