//! Which logic module each RPC calls, kept stable across `zrpcctl proto` runs.
//!
//! `src/logic/mod.rs` records the wiring, one line per RPC:
//!
//! ```text
//! pub mod audit_service_ping; // AuditService.Ping
//! pub mod ping; // InventoryService.Ping
//! ```
//!
//! An RPC with a record keeps its module, whatever else the proto gains. An RPC without one
//! (new, or a crate from a zrpcctl that wrote no records) first adopts an unwired logic file whose
//! first line names it (``//! `InventoryService.Ping` ...``, as every stub starts), then takes its
//! method name (`ping`) when free and no other RPC of the proto has it, else
//! `<service>_<method>`. Only a new RPC is ever given a new
//! name; a module is never handed to another RPC. What cannot be decided safely (two files
//! claiming one RPC, a record naming a module twice) is an error saying what to do.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::proto::{file_stem, rust_ident, snake, snake_ident};
use crate::{Result, fail};

/// One RPC, by its proto names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RpcName<'a> {
    pub(crate) service: &'a str,
    pub(crate) rpc: &'a str,
}

impl RpcName<'_> {
    /// `Service.Rpc`, as records and stub headers write it.
    pub(crate) fn full(&self) -> String {
        format!("{}.{}", self.service, self.rpc)
    }
}

/// The wiring decided for one run.
#[derive(Debug)]
pub(crate) struct Wiring {
    /// The module identifier of each RPC, in the order given.
    pub(crate) modules: Vec<String>,
    /// Logic files no RPC calls any more, with the RPC they were written for (when known).
    pub(crate) orphans: Vec<(PathBuf, Option<String>)>,
}

/// A logic file already in `src/logic`.
#[derive(Debug)]
struct Existing {
    path: PathBuf,
    /// The RPC its first line names.
    header: Option<String>,
}

/// Plans the module of each of `rpcs` for the crate whose logic lives in `logic_dir`.
///
/// # Errors
///
/// `mod.rs` records one module or one RPC twice, or two unwired files both say they implement
/// the same RPC.
pub(crate) fn plan(logic_dir: &Path, rpcs: &[RpcName<'_>]) -> Result<Wiring> {
    let records = read_records(logic_dir)?;
    let files = existing_files(logic_dir);
    let recorded_stems: BTreeSet<&str> = records.keys().map(|m| file_stem(m)).collect();
    let by_rpc: BTreeMap<&str, &str> = records
        .iter()
        .map(|(module, full)| (full.as_str(), module.as_str()))
        .collect();

    let mut modules: Vec<Option<String>> = vec![None; rpcs.len()];
    // 1. Recorded RPCs keep their module (recreated as a stub if its file was deleted, unless
    //    the user moved the code to another file that names the RPC: step 2 adopts that one).
    let mut missing: Vec<(usize, String)> = Vec::new();
    for (i, r) in rpcs.iter().enumerate() {
        if let Some(module) = by_rpc.get(r.full().as_str()) {
            if files.contains_key(file_stem(module)) {
                modules[i] = Some((*module).to_owned());
            } else {
                missing.push((i, (*module).to_owned()));
            }
        }
    }
    // 2. Unrecorded RPCs adopt the one unwired, unrecorded file that names them.
    for (i, r) in rpcs.iter().enumerate() {
        if modules[i].is_some() {
            continue;
        }
        let full = r.full();
        let claims: Vec<(&String, &Existing)> = files
            .iter()
            .filter(|(stem, f)| {
                !recorded_stems.contains(stem.as_str()) && f.header.as_deref() == Some(&full)
            })
            .collect();
        match claims.as_slice() {
            [] => {}
            [(stem, _)] => modules[i] = Some(rust_ident(stem)),
            many => return Err(fail(claimed_twice(&full, many))),
        }
    }
    for (i, module) in missing {
        modules[i].get_or_insert(module);
    }
    // 3. New RPCs: the method name when free and no other RPC of the proto has it, else
    //    prefixed by the service; a numeric suffix if even that is taken.
    let mut taken: BTreeSet<String> = files.keys().cloned().collect();
    taken.extend(recorded_stems.iter().map(|s| (*s).to_owned()));
    taken.extend(modules.iter().flatten().map(|m| file_stem(m).to_owned()));
    taken.insert("mod".to_owned());
    let mut shared: BTreeMap<String, usize> = BTreeMap::new();
    for r in rpcs {
        *shared.entry(snake_ident(r.rpc)).or_default() += 1;
    }
    for (i, r) in rpcs.iter().enumerate() {
        if modules[i].is_some() {
            continue;
        }
        let plain = snake_ident(r.rpc);
        let name = if shared[&plain] == 1 && !taken.contains(file_stem(&plain)) {
            plain
        } else {
            let prefixed = rust_ident(&format!("{}_{}", snake(r.service), snake(r.rpc)));
            let mut name = prefixed.clone();
            let mut n = 2;
            while taken.contains(file_stem(&name)) {
                name = format!("{prefixed}_{n}");
                n += 1;
            }
            name
        };
        taken.insert(file_stem(&name).to_owned());
        modules[i] = Some(name);
    }

    let modules: Vec<String> = modules.into_iter().flatten().collect();
    let wired: BTreeSet<&str> = modules.iter().map(|m| file_stem(m)).collect();
    let orphans = files
        .iter()
        .filter(|(stem, _)| !wired.contains(stem.as_str()))
        .map(|(stem, f)| {
            let rpc = records
                .iter()
                .find(|(m, _)| file_stem(m) == stem)
                .map(|(_, full)| full.clone())
                .or_else(|| f.header.clone());
            (f.path.clone(), rpc)
        })
        .collect();
    Ok(Wiring { modules, orphans })
}

/// `src/logic/mod.rs` with one record per RPC, sorted as rustfmt sorts `mod` lines (by name,
/// byte order, `r#` ignored), so the file is `cargo fmt` clean as written.
pub(crate) fn mod_rs(wired: &[(String, String)]) -> String {
    let mut lines: Vec<&(String, String)> = wired.iter().collect();
    lines.sort_by(|a, b| file_stem(&a.0).cmp(file_stem(&b.0)));
    let mut out = String::from(
        "//! One module per RPC: your code. Generated by zrpcctl: `zrpcctl proto` rewrites this list\n\
         //! but keeps each RPC on the module its comment names, and never overwrites the modules.\n\n",
    );
    for (module, full) in lines {
        out.push_str(&format!("pub mod {module}; // {full}\n"));
    }
    out
}

/// Records of `mod.rs`: module identifier -> `Service.Rpc`.
fn read_records(logic_dir: &Path) -> Result<BTreeMap<String, String>> {
    let path = logic_dir.join("mod.rs");
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(BTreeMap::new());
    };
    let mut records = BTreeMap::new();
    let mut rpcs = BTreeSet::new();
    for line in text.lines() {
        let Some((module, full)) = record(line) else {
            continue;
        };
        if !rpcs.insert(full.to_owned()) {
            return Err(fail(format!(
                "{}: {full} is recorded twice; keep the line of the module that holds its code",
                path.display()
            )));
        }
        if records.insert(module.to_owned(), full.to_owned()).is_some() {
            return Err(fail(format!(
                "{}: module {module} is recorded for two RPCs; give each RPC its own module",
                path.display()
            )));
        }
    }
    Ok(records)
}

/// `pub mod ping; // InventoryService.Ping` -> (`ping`, `InventoryService.Ping`).
fn record(line: &str) -> Option<(&str, &str)> {
    let rest = line.trim().strip_prefix("pub mod ")?;
    let (module, comment) = rest.split_once(';')?;
    let full = comment.trim().strip_prefix("//")?.trim();
    let valid_module = !module.is_empty()
        && file_stem(module)
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_');
    let valid_rpc = full
        .split_once('.')
        .is_some_and(|(s, r)| !s.is_empty() && !r.is_empty() && !full.contains(' '));
    (valid_module && valid_rpc).then_some((module, full))
}

/// The `.rs` files of `logic_dir` but `mod.rs`, by stem.
fn existing_files(logic_dir: &Path) -> BTreeMap<String, Existing> {
    let mut out = BTreeMap::new();
    let Ok(dir) = std::fs::read_dir(logic_dir) else {
        return out;
    };
    for entry in dir.flatten() {
        let path = entry.path();
        if !path.is_file() || path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let Some(stem) = path.file_stem().map(|s| s.to_string_lossy().into_owned()) else {
            continue;
        };
        if stem == "mod" {
            continue;
        }
        let header = std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| t.lines().next().and_then(header_rpc));
        out.insert(stem, Existing { path, header });
    }
    out
}

/// ``//! `InventoryService.Ping` (unary): ...`` -> `InventoryService.Ping`.
fn header_rpc(first_line: &str) -> Option<String> {
    let rest = first_line.trim().strip_prefix("//!")?.trim_start();
    let inner = rest.strip_prefix('`')?;
    let full = &inner[..inner.find('`')?];
    full.contains('.').then(|| full.to_owned())
}

fn claimed_twice(full: &str, claims: &[(&String, &Existing)]) -> String {
    let files: Vec<String> = claims
        .iter()
        .map(|(_, f)| {
            let stub = std::fs::read_to_string(&f.path).is_ok_and(|t| t.contains(STUB_MARKER));
            let mut s = f.path.display().to_string();
            if stub {
                s.push_str(" (still the Unimplemented stub)");
            }
            s
        })
        .collect();
    format!(
        "{} all say they implement {full}, and src/logic/mod.rs records none of them; delete the ones that are not your code (an older zrpcctl may have written a second stub), then run `zrpcctl proto` again",
        files.join(", ")
    )
}

/// A line every generated stub has until the user writes the RPC.
pub(crate) const STUB_MARKER: &str = "is not implemented yet";
