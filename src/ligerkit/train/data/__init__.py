"""A recipe's data: the shipped corpus or a user's own file (``files``), tokenized, packed and batched
(``batches``)."""
