//! Names of the fields the text operators read and write.

/// The default source field of [`tokenize`](crate::TextPipelineExt::tokenize).
pub const TEXT: &str = "text";
/// Token ids (a tokenized document, or a packed row).
pub const INPUT_IDS: &str = "input_ids";
/// Attention mask of a tokenized document (all ones), when asked for.
pub const ATTENTION_MASK: &str = "attention_mask";
/// Per token of a packed row: the document number within the row from 1,
/// 0 for padding.
pub const SEGMENT_IDS: &str = "segment_ids";
/// Per token of a packed row: the position within its document.
pub const POSITION_IDS: &str = "position_ids";
/// Per token of a tokenized conversation: 1 where the model learns the
/// token (assistant output), 0 elsewhere.
pub const LOSS_MASK: &str = "loss_mask";
