use super::RecordError;

#[test]
fn a_record_error_names_its_whole_cause() {
    let e = RecordError(Box::new(std::io::Error::other("disk full")));
    assert_eq!(e.to_string(), "the audit record could not be written");
    assert_eq!(e.chain(), "the audit record could not be written: disk full");
}
