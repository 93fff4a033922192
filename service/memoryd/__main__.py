import sys

from memoryd.main import main

sys.exit(main())
