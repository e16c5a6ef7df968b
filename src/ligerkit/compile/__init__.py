"""Compile mode: Liger's kernels as operators ``torch.compile`` understands, and where Inductor wins.

- ``ops``: the ``ligerkit::*`` custom operators (fake implementations, autograd, no in-place writes);
- ``routes``: the names in Liger's modules rebound to them while the kit is applied with ``compile=True``;
- ``table``: the committed H200 measurements that leave a module to Inductor in compile mode;
- ``layers``: ``torch.compile`` per decoder layer, for the trainer and the proofs.

The kit's step that rebinds the routes (``ligerkit.kit.compile_mode``) and the config key
(``ligerkit.train.config.compile_mode``) stay in their layers and use these.
"""
