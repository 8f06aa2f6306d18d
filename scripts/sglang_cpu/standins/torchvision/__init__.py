"""Stand-in for torchvision (see abh_standin.py): every name fails loudly when used."""
from abh_standin import module_getattr

__getattr__ = module_getattr(__name__)
# transformers reads this version (it has no distribution metadata): below every torchvision it asks for, so
# its image processors keep to their PIL backends
__version__ = "0.0.0+abh.standin"
