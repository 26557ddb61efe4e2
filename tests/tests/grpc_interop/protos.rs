//! The repository's `proto/grpc/testing/*.proto` against the descriptors grpc-go v1.83.2 compiled
//! from the official files (`testing-descriptors` prints them): every message, enum and service
//! the repository defines is the same, field by field (name, number, label, type, type name,
//! oneof, map entry), and every type grpc-go's `TestService` and `UnimplementedService` reach is
//! defined. The official files' load-balancer, xDS and hook services and their messages are the
//! only ones left out.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use prost::Message as _;
use zrpc::prost_types::{
    DescriptorProto, EnumDescriptorProto, FileDescriptorProto, FileDescriptorSet,
    ServiceDescriptorProto,
};

/// The services the interop cases call.
const SERVICES: [&str; 2] = [
    ".grpc.testing.TestService",
    ".grpc.testing.UnimplementedService",
];

#[test]
fn grpc_testing_protos_match_grpc_go_field_by_field() {
    let p = zrpc_tests::grpcgo_or_skip!();
    let out = Command::new(&p.descriptors)
        .output()
        .expect("run testing-descriptors");
    assert!(
        out.status.success(),
        "testing-descriptors failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let theirs = Defs::of(&FileDescriptorSet::decode(&out.stdout[..]).expect("grpc-go's set"));
    let ours = Defs::of(
        &FileDescriptorSet::decode(zrpc_interop::pb::FILE_DESCRIPTOR_SET).expect("our set"),
    );

    let mut problems = Vec::new();
    for (name, def) in &ours.all {
        match theirs.all.get(name) {
            None => problems.push(format!("{name}: grpc-go has no such definition")),
            Some(t) if t != def => {
                problems.push(format!("{name} differs:\n  ours:   {def}\n  grpc-go: {t}"))
            }
            Some(_) => {}
        }
    }
    let reached = theirs.reached_from(&SERVICES);
    for name in &reached {
        if !ours.all.contains_key(name) {
            problems.push(format!(
                "{name}: reached from the interop services, not defined here"
            ));
        }
    }
    let our_services: BTreeSet<_> = ours.services.iter().map(String::as_str).collect();
    assert_eq!(
        our_services,
        SERVICES.into_iter().collect(),
        "the services defined here"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The check compared something: every service, and the messages they use.
    assert!(reached.len() >= 14, "reached only {reached:?}");
    eprintln!(
        "{} definitions match grpc-go's ({} reached from the interop services)",
        ours.all.len(),
        reached.len()
    );
}

/// Every definition of a descriptor set by full name (`.grpc.testing.SimpleRequest`), in a
/// normal form: what the wire and the generated code depend on, without options that only name
/// packages of other languages, or source positions.
struct Defs {
    all: BTreeMap<String, String>,
    services: Vec<String>,
    /// type -> the types its fields, methods or nested maps name
    uses: BTreeMap<String, BTreeSet<String>>,
}

impl Defs {
    fn of(set: &FileDescriptorSet) -> Defs {
        let mut defs = Defs {
            all: BTreeMap::new(),
            services: Vec::new(),
            uses: BTreeMap::new(),
        };
        for file in set.file.iter().filter(|f| f.package() == "grpc.testing") {
            defs.file(file);
        }
        defs
    }

    fn file(&mut self, file: &FileDescriptorProto) {
        let scope = format!(".{}", file.package());
        for m in &file.message_type {
            self.message(&scope, m);
        }
        for e in &file.enum_type {
            self.enumeration(&scope, e);
        }
        for s in &file.service {
            self.service(&scope, s);
        }
    }

    fn message(&mut self, scope: &str, m: &DescriptorProto) {
        let name = format!("{scope}.{}", m.name());
        let fields: Vec<String> = m
            .field
            .iter()
            .map(|f| {
                format!(
                    "{} = {} {:?} {:?} {} oneof={:?} proto3_optional={} deprecated={}",
                    f.name(),
                    f.number(),
                    f.label(),
                    f.r#type(),
                    f.type_name(),
                    f.oneof_index,
                    f.proto3_optional(),
                    f.options.as_ref().is_some_and(|o| o.deprecated()),
                )
            })
            .collect();
        let oneofs: Vec<&str> = m.oneof_decl.iter().map(|o| o.name()).collect();
        let nested: Vec<&str> = m.nested_type.iter().map(|n| n.name()).collect();
        let enums: Vec<&str> = m.enum_type.iter().map(|e| e.name()).collect();
        let map_entry = m.options.as_ref().is_some_and(|o| o.map_entry());
        self.all.insert(
            name.clone(),
            format!(
                "message {{ fields: {fields:?}, oneofs: {oneofs:?}, nested: {nested:?}, enums: {enums:?}, map_entry: {map_entry} }}"
            ),
        );
        let used: BTreeSet<String> = m
            .field
            .iter()
            .filter(|f| !f.type_name().is_empty())
            .map(|f| f.type_name().to_owned())
            .collect();
        self.uses.insert(name.clone(), used);
        for n in &m.nested_type {
            self.message(&name, n);
        }
        for e in &m.enum_type {
            self.enumeration(&name, e);
        }
    }

    fn enumeration(&mut self, scope: &str, e: &EnumDescriptorProto) {
        let values: Vec<String> = e
            .value
            .iter()
            .map(|v| format!("{} = {}", v.name(), v.number()))
            .collect();
        self.all
            .insert(format!("{scope}.{}", e.name()), format!("enum {values:?}"));
    }

    fn service(&mut self, scope: &str, s: &ServiceDescriptorProto) {
        let name = format!("{scope}.{}", s.name());
        let methods: Vec<String> = s
            .method
            .iter()
            .map(|m| {
                format!(
                    "{}({}{}) returns ({}{})",
                    m.name(),
                    if m.client_streaming() { "stream " } else { "" },
                    m.input_type(),
                    if m.server_streaming() { "stream " } else { "" },
                    m.output_type()
                )
            })
            .collect();
        self.all
            .insert(name.clone(), format!("service {methods:?}"));
        let used = s
            .method
            .iter()
            .flat_map(|m| [m.input_type().to_owned(), m.output_type().to_owned()])
            .collect();
        self.uses.insert(name.clone(), used);
        self.services.push(name);
    }

    /// Every definition `roots` name, directly or through other definitions (roots included),
    /// with the nested types of each message reached.
    fn reached_from(&self, roots: &[&str]) -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo: Vec<String> = roots.iter().map(|r| (*r).to_owned()).collect();
        while let Some(name) = todo.pop() {
            if !seen.insert(name.clone()) {
                continue;
            }
            todo.extend(self.uses.get(&name).into_iter().flatten().cloned());
            let nested = format!("{name}.");
            todo.extend(
                self.all
                    .keys()
                    .filter(|k| k.starts_with(&nested) && !k[nested.len()..].contains('.'))
                    .cloned(),
            );
        }
        seen
    }
}
