//! Reading a Dockerfile's final stage.

use super::dockerfile::{CopyInstruction, DockerfileError, final_stage};

const TWO_STAGES: &str = r#"
# syntax comment
FROM rust:1.95-bookworm AS build
RUN cargo build --release \
 && cp target/release/app /app
USER builder

FROM scratch
COPY --from=build /app /app
# a comment between instructions
COPY --from=build --chmod=0644 /lib/a.so \
     /lib/b.so /lib/
COPY etc/passwd /etc/passwd
user 65532:65532
EXPOSE 8081 9443/tcp 53/udp
LABEL org.example.title="two words" org.example.plain=x
ENV A=1 B="b c"
ENTRYPOINT ["/app", "--flag"]
"#;

#[test]
fn only_the_final_stage_is_read() {
    let stage = final_stage(TWO_STAGES).unwrap();
    assert_eq!(stage.base, "scratch");
    assert_eq!(stage.user.as_deref(), Some("65532:65532"));
    assert_eq!(stage.entrypoint, Some(vec!["/app".to_string(), "--flag".to_string()]));
    assert_eq!(
        stage.ports.iter().map(String::as_str).collect::<Vec<_>>(),
        ["53/udp", "8081/tcp", "9443/tcp"]
    );
    assert_eq!(stage.labels["org.example.title"], "two words");
    assert_eq!(stage.labels["org.example.plain"], "x");
    assert_eq!(stage.env, ["A=1", "B=b c"]);
}

#[test]
fn copies_keep_their_stage_and_land_where_docker_puts_them() {
    let stage = final_stage(TWO_STAGES).unwrap();
    let targets: Vec<(Option<&str>, String)> = stage
        .copies
        .iter()
        .flat_map(|c| c.targets().into_iter().map(|(_, t)| (c.from.as_deref(), t)))
        .collect();
    assert_eq!(
        targets,
        [
            (Some("build"), "/app".to_string()),
            (Some("build"), "/lib/a.so".to_string()),
            (Some("build"), "/lib/b.so".to_string()),
            (None, "/etc/passwd".to_string()),
        ]
    );
}

#[test]
fn a_copy_lands_in_its_destination_directory_only_when_told() {
    let copy = |sources: &[&str], dest: &str| CopyInstruction {
        from: None,
        sources: sources.iter().map(|s| s.to_string()).collect(),
        dest: dest.into(),
    };
    let targets = |c: CopyInstruction| c.targets().into_iter().map(|(_, t)| t).collect::<Vec<_>>();
    assert_eq!(targets(copy(&["a/x"], "/y")), ["/y"]);
    assert_eq!(targets(copy(&["a/x"], "/d/")), ["/d/x"]);
    assert_eq!(targets(copy(&["a/x", "b/z"], "/d")), ["/d/x", "/d/z"]);
    assert_eq!(targets(copy(&["/image-tmp"], "/tmp")), ["/tmp"]);
}

#[test]
fn an_instruction_whose_effect_is_not_compared_is_refused_in_the_final_stage() {
    let text = "FROM debian AS b\nRUN true\nFROM scratch\nWORKDIR /x\n";
    assert_eq!(
        final_stage(text),
        Err(DockerfileError::Unsupported {
            line: 4,
            instruction: "WORKDIR".into()
        })
    );
}

#[test]
fn malformed_instructions_are_errors_with_their_line() {
    for (text, line) in [
        ("FROM scratch\nENTRYPOINT /vrouter-operator\n", 2),
        ("FROM scratch\n\nLABEL title value\n", 3),
        ("FROM scratch\nCOPY /only-one\n", 2),
        ("FROM scratch\nCOPY [\"a\", \"/b\"]\n", 2),
        ("FROM scratch\nLABEL a=\"unclosed\n", 2),
    ] {
        match final_stage(text) {
            Err(DockerfileError::Malformed { line: found, .. }) => assert_eq!(found, line, "{text}"),
            other => panic!("{text}: {other:?}"),
        }
    }
    assert_eq!(final_stage("# nothing\n"), Err(DockerfileError::NoStage));
}
