//! The operator binary. Controllers and webhooks arrive with their issues; for
//! now it only reports what it would serve.

fn main() -> anyhow::Result<()> {
    let kinds: Vec<String> = vrouter_api::crds::all()
        .into_iter()
        .filter_map(|crd| crd.metadata.name)
        .collect();
    println!("vrouter-operator: serves {}", kinds.join(", "));
    Ok(())
}
