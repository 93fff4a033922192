import sys

from memoryd.cli.entry import main

sys.exit(main())
