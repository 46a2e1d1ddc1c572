"""PyTorch runtime glue: registration of the `spyre` device and the ``torch.spyre`` module."""
