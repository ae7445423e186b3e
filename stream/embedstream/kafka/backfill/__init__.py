"""A migration's reads of the documents topic: the backfill lane's feed, its read-ahead, the
store's answer of what the new generation holds, and the doc_ids the topic holds now."""
