"""A recipe: its engine (``engine``: ``RecipeEngine``, what a recipe declares), finding it on disk
(``loading``), its model set up in the order the trainer runs (``setup``), the base engine of a
custom-model recipe (``custom_model``), LoRA adapters (``adapters``) and the memory estimate a config
is refused by (``footprint``)."""
