import sys

from blockattn.cli import main

sys.exit(main())
