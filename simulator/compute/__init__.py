"""How long a GPU computes: the roofline model per kernel (``gpu``)."""
