"""Integrations with other libraries, each imported on its own so that ``import razorlib``
never imports them (``razorlib.integrations.transformers`` for Hugging Face models)."""
