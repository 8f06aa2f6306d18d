"""Stand-in for torchvision.transforms.functional (see abh_standin.py): every name fails loudly when used."""
from abh_standin import module_getattr

__getattr__ = module_getattr(__name__)
