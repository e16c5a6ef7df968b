"""Compile mode: Liger's kernels as operators ``torch.compile`` understands, and where Inductor wins.

- ``ops``: the ``ligerkit::*`` custom operators (fake implementations, autograd, no in-place writes);
- ``routes``: the names in Liger's modules rebound to them while the kit is applied with ``compile=True``;
- ``table``: the committed H200 measurements that leave a module to Inductor in compile mode.
"""
