"""schema/playlists"""
