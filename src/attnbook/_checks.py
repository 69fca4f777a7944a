from .validators import *  # noqa: F401,F403  (the old name of attnbook.validators; new code imports that)
