"""Small shared package: the one error tree, status codes and units.

Imported by every part (hbfcc, hbfd, runtime_cuda); imports none of them.
"""
