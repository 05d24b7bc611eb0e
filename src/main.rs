fn main() {
    if std::env::args().nth(1).as_deref() == Some("__reaper") {
        talaria::engine::jobs::reaper::run();
    }
}
