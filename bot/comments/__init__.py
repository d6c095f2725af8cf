"""A `/bot` PR comment: the command language, the handling session, who may do what, the SHA pin,
the rate limit, the bot's replies.
"""
