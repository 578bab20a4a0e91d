//! Every input of `corpus/<target>/` (seeds, and the crashes fuzzing found, kept once
//! fixed) runs through its target: a short run on every test, without AFL.

#[test]
fn every_corpus_input_runs_clean() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let mut ran = 0;
    for (name, target) in tern_fuzz::TARGETS {
        let dir = root.join(name);
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            target(&data);
            ran += 1;
        }
    }
    assert!(ran >= tern_fuzz::TARGETS.len(), "the corpus has seeds");
}
