//! talaria rewind
