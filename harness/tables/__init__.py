"""Results as text: the records frame (pandas), the family tables built from it, the terminal's
rendering of them, and exports of the frame to files.
"""
