"""What puts the model in motion: the composition root (`cluster.py`), the
virtual-time runtime (`virtual/`) and the process runtime (`process/`)."""
