import sys

from langmem_ext.cli import main

sys.exit(main())
