-- A hub.db made by the pre-Alembic code (schema_versions = 1): a 2-link chain tagged acme/py:head and an admin token.
-- Regenerate only if that code changes; tests/hub_server/db/test_schema.py upgrades it.
BEGIN TRANSACTION;
CREATE TABLE audit_events (
	id INTEGER NOT NULL, 
	at DATETIME NOT NULL, 
	actor VARCHAR(128) NOT NULL, 
	action VARCHAR(64) NOT NULL, 
	repository VARCHAR(256), 
	reference VARCHAR(256), 
	digest VARCHAR(160), 
	remote VARCHAR(128), 
	detail TEXT NOT NULL, 
	PRIMARY KEY (id)
);
INSERT INTO "audit_events" VALUES(1,'2026-12-01 11:42:12.395521','admin','push','acme/py','blake3:df74910689d9f9785432a0c647350572dbe7d105f63419f35f44430439c77afd','blake3:df74910689d9f9785432a0c647350572dbe7d105f63419f35f44430439c77afd','testclient','{"mediaType": "application/vnd.oci.image.manifest.v1+json", "newChunks": 11, "reusedChunks": 0}');
INSERT INTO "audit_events" VALUES(2,'2026-12-01 11:42:12.481078','admin','push','acme/py','blake3:6a2115f7eceaafc0ef0b8adb6aeab835cb7c48123cce2538f57da28350dee7b7','blake3:6a2115f7eceaafc0ef0b8adb6aeab835cb7c48123cce2538f57da28350dee7b7','testclient','{"mediaType": "application/vnd.oci.image.manifest.v1+json", "newChunks": 4, "reusedChunks": 0}');
INSERT INTO "audit_events" VALUES(3,'2026-12-01 11:42:12.494776','admin','tag','acme/py','head','blake3:6a2115f7eceaafc0ef0b8adb6aeab835cb7c48123cce2538f57da28350dee7b7','testclient','{}');
CREATE TABLE blobs (
	digest VARCHAR(80) NOT NULL, 
	size BIGINT NOT NULL, 
	media_type VARCHAR, 
	created_at DATETIME NOT NULL, 
	PRIMARY KEY (digest)
);
INSERT INTO "blobs" VALUES('blake3:444aa4cd15f9b00f958fb7f1eca961eccf93b18d815467ccbba63c616fbbc9db',278590,'application/vnd.forkd.chunks.v1+zstd','2026-12-01 11:42:12.331162');
INSERT INTO "blobs" VALUES('blake3:f90f5fee3b62aa9b8bd0e41811a10e7f4d62d9a484e46ee8612198e62bffe668',498,'application/vnd.forkd.snapshot.config.v1+json','2026-12-01 11:42:12.346921');
INSERT INTO "blobs" VALUES('blake3:e93c6fe104a6ab0cb6cd86996d8e25e10d04833c8edd2ce547b922a60d96601f',1337,'application/vnd.forkd.chunkmap.v1+json','2026-12-01 11:42:12.361492');
INSERT INTO "blobs" VALUES('blake3:0cf0de4a35d8ccb4042da4b3f5b3d08bee19cc8b9724b5a8a14ae3df71a8f9bb',26,'application/vnd.forkd.vmstate.v1+zstd','2026-12-01 11:42:12.374996');
INSERT INTO "blobs" VALUES('blake3:df74910689d9f9785432a0c647350572dbe7d105f63419f35f44430439c77afd',802,'application/vnd.oci.image.manifest.v1+json','2026-12-01 11:42:12.382188');
INSERT INTO "blobs" VALUES('blake3:bf26d01264f23d97fa0cbd17642c434b718e3a3d7211eddac2d1c828570864a6',73841,'application/vnd.forkd.chunks.v1+zstd','2026-12-01 11:42:12.427327');
INSERT INTO "blobs" VALUES('blake3:ce27f95359ef70e2394ed5bafbd9f8a7b5b2355e1cea76ca7817a660f8efd99d',589,'application/vnd.forkd.snapshot.config.v1+json','2026-12-01 11:42:12.439655');
INSERT INTO "blobs" VALUES('blake3:8c12c1b4cc1ac7c81e7d7c54742c09862f4157d66aad4b614b7b80af42ad1114',756,'application/vnd.forkd.chunkmap.v1+json','2026-12-01 11:42:12.452324');
INSERT INTO "blobs" VALUES('blake3:dadd421bf07447f126fca29f8a4ec16c62e71469e85293f215deeda015086987',26,'application/vnd.forkd.vmstate.v1+zstd','2026-12-01 11:42:12.464729');
INSERT INTO "blobs" VALUES('blake3:6a2115f7eceaafc0ef0b8adb6aeab835cb7c48123cce2538f57da28350dee7b7',800,'application/vnd.oci.image.manifest.v1+json','2026-12-01 11:42:12.473350');
CREATE TABLE chunks (
	id INTEGER NOT NULL, 
	digest VARCHAR(80) NOT NULL, 
	blob_digest VARCHAR(80) NOT NULL, 
	"offset" BIGINT NOT NULL, 
	length INTEGER NOT NULL, 
	PRIMARY KEY (id), 
	CONSTRAINT uq_chunks_location UNIQUE (blob_digest, "offset", length, digest), 
	FOREIGN KEY(blob_digest) REFERENCES blobs (digest) ON DELETE CASCADE
);
INSERT INTO "chunks" VALUES(1,'blake3:9c8802c4b155e9116245db5f444bb37e539209059bb0a95e43d3abb9fed5d603','blake3:444aa4cd15f9b00f958fb7f1eca961eccf93b18d815467ccbba63c616fbbc9db',0,4134);
INSERT INTO "chunks" VALUES(2,'blake3:d198e931e0df46cd8de057b237f2853588c3c22cf61cb2932c1a9571f61bc63f','blake3:444aa4cd15f9b00f958fb7f1eca961eccf93b18d815467ccbba63c616fbbc9db',4134,34720);
INSERT INTO "chunks" VALUES(3,'blake3:f0d9af98e6847a517550188eab2087e8a406fc0e3346f182231ad427085209d6','blake3:444aa4cd15f9b00f958fb7f1eca961eccf93b18d815467ccbba63c616fbbc9db',38854,65546);
INSERT INTO "chunks" VALUES(4,'blake3:125c5fa80418b89b70372c3c9c945ac1143953c32d08de5f925afa2b89007447','blake3:444aa4cd15f9b00f958fb7f1eca961eccf93b18d815467ccbba63c616fbbc9db',104400,65546);
INSERT INTO "chunks" VALUES(5,'blake3:def5b4badae17f7d7630f00ff5b9e31ea1f3b279fe6551b2222a7342d4197f70','blake3:444aa4cd15f9b00f958fb7f1eca961eccf93b18d815467ccbba63c616fbbc9db',169946,34280);
INSERT INTO "chunks" VALUES(6,'blake3:6c8435c49b9b11a4f7ac22265f06e6c0e21ae7a34132b72c67733a92db9d8860','blake3:444aa4cd15f9b00f958fb7f1eca961eccf93b18d815467ccbba63c616fbbc9db',204226,25);
INSERT INTO "chunks" VALUES(7,'blake3:529ba9abc110191c3f5cb58d5e4ddc99e35792b6b8b4c9fa0e362ff4a88025c6','blake3:444aa4cd15f9b00f958fb7f1eca961eccf93b18d815467ccbba63c616fbbc9db',204251,4135);
INSERT INTO "chunks" VALUES(8,'blake3:960d3c96248e123cd86f918bc8c214ec78725f96f880958f4345e3e737adf12e','blake3:444aa4cd15f9b00f958fb7f1eca961eccf93b18d815467ccbba63c616fbbc9db',208386,126);
INSERT INTO "chunks" VALUES(9,'blake3:2515ed71b4b353612ea41f161ea6db1d9eaa16f1c4b156e72dff93d1726e69b2','blake3:444aa4cd15f9b00f958fb7f1eca961eccf93b18d815467ccbba63c616fbbc9db',208512,27);
INSERT INTO "chunks" VALUES(10,'blake3:58b633b6b1a6ed7af73516ea15b4dac895c239dfdeb48cd88aeb1a932537ab1f','blake3:444aa4cd15f9b00f958fb7f1eca961eccf93b18d815467ccbba63c616fbbc9db',208539,11040);
INSERT INTO "chunks" VALUES(11,'blake3:c2b487a75497e7dd10f711ca41d1c2a7bb837a0d30642896576cc737afb15518','blake3:444aa4cd15f9b00f958fb7f1eca961eccf93b18d815467ccbba63c616fbbc9db',219579,59011);
INSERT INTO "chunks" VALUES(12,'blake3:643e8fda10e3ff8f1b8f6bd17c1aa1f4aef4b550f00f8373fadf1807dcbf6f80','blake3:bf26d01264f23d97fa0cbd17642c434b718e3a3d7211eddac2d1c828570864a6',0,65546);
INSERT INTO "chunks" VALUES(13,'blake3:492c05a8e4b92afec63c9da8d71a6830cd9802e74212099eb50de966d38d1176','blake3:bf26d01264f23d97fa0cbd17642c434b718e3a3d7211eddac2d1c828570864a6',65546,25);
INSERT INTO "chunks" VALUES(14,'blake3:c9c02b176d18692aaccf3be5324cb1232c3f3a26a61cd34fe23ef0a5a94e2d93','blake3:bf26d01264f23d97fa0cbd17642c434b718e3a3d7211eddac2d1c828570864a6',65571,4135);
INSERT INTO "chunks" VALUES(15,'blake3:476be99dc27a6ca9a750a551cbccc1d645ca7968f9487e636f393017bd2c785e','blake3:bf26d01264f23d97fa0cbd17642c434b718e3a3d7211eddac2d1c828570864a6',69706,4135);
CREATE TABLE manifest_blobs (
	manifest_digest VARCHAR(80) NOT NULL, 
	blob_digest VARCHAR(80) NOT NULL, 
	role VARCHAR(16) NOT NULL, 
	PRIMARY KEY (manifest_digest, blob_digest), 
	FOREIGN KEY(manifest_digest) REFERENCES manifests (digest) ON DELETE CASCADE, 
	FOREIGN KEY(blob_digest) REFERENCES blobs (digest) ON DELETE RESTRICT
);
INSERT INTO "manifest_blobs" VALUES('blake3:df74910689d9f9785432a0c647350572dbe7d105f63419f35f44430439c77afd','blake3:f90f5fee3b62aa9b8bd0e41811a10e7f4d62d9a484e46ee8612198e62bffe668','config');
INSERT INTO "manifest_blobs" VALUES('blake3:df74910689d9f9785432a0c647350572dbe7d105f63419f35f44430439c77afd','blake3:0cf0de4a35d8ccb4042da4b3f5b3d08bee19cc8b9724b5a8a14ae3df71a8f9bb','vmstate');
INSERT INTO "manifest_blobs" VALUES('blake3:df74910689d9f9785432a0c647350572dbe7d105f63419f35f44430439c77afd','blake3:e93c6fe104a6ab0cb6cd86996d8e25e10d04833c8edd2ce547b922a60d96601f','chunkmap');
INSERT INTO "manifest_blobs" VALUES('blake3:df74910689d9f9785432a0c647350572dbe7d105f63419f35f44430439c77afd','blake3:444aa4cd15f9b00f958fb7f1eca961eccf93b18d815467ccbba63c616fbbc9db','data');
INSERT INTO "manifest_blobs" VALUES('blake3:6a2115f7eceaafc0ef0b8adb6aeab835cb7c48123cce2538f57da28350dee7b7','blake3:ce27f95359ef70e2394ed5bafbd9f8a7b5b2355e1cea76ca7817a660f8efd99d','config');
INSERT INTO "manifest_blobs" VALUES('blake3:6a2115f7eceaafc0ef0b8adb6aeab835cb7c48123cce2538f57da28350dee7b7','blake3:dadd421bf07447f126fca29f8a4ec16c62e71469e85293f215deeda015086987','vmstate');
INSERT INTO "manifest_blobs" VALUES('blake3:6a2115f7eceaafc0ef0b8adb6aeab835cb7c48123cce2538f57da28350dee7b7','blake3:8c12c1b4cc1ac7c81e7d7c54742c09862f4157d66aad4b614b7b80af42ad1114','chunkmap');
INSERT INTO "manifest_blobs" VALUES('blake3:6a2115f7eceaafc0ef0b8adb6aeab835cb7c48123cce2538f57da28350dee7b7','blake3:bf26d01264f23d97fa0cbd17642c434b718e3a3d7211eddac2d1c828570864a6','data');
CREATE TABLE manifests (
	digest VARCHAR(80) NOT NULL, 
	size INTEGER NOT NULL, 
	media_type VARCHAR NOT NULL, 
	artifact_type VARCHAR, 
	config_digest VARCHAR(80), 
	parent_digest VARCHAR(80), 
	created_at DATETIME NOT NULL, 
	logical_size BIGINT NOT NULL, 
	stored_size BIGINT NOT NULL, 
	shared_with_parent BIGINT NOT NULL, 
	compat JSON NOT NULL, 
	annotations JSON NOT NULL, 
	PRIMARY KEY (digest)
);
INSERT INTO "manifests" VALUES('blake3:df74910689d9f9785432a0c647350572dbe7d105f63419f35f44430439c77afd',802,'application/vnd.oci.image.manifest.v1+json','application/vnd.forkd.snapshot.layer.v1','blake3:f90f5fee3b62aa9b8bd0e41811a10e7f4d62d9a484e46ee8612198e62bffe668',NULL,'2026-12-01 11:42:12.382188',4195204,278590,0,'{"vmm": "qemu-microvm", "memMiB": 4}','{}');
INSERT INTO "manifests" VALUES('blake3:6a2115f7eceaafc0ef0b8adb6aeab835cb7c48123cce2538f57da28350dee7b7',800,'application/vnd.oci.image.manifest.v1+json','application/vnd.forkd.snapshot.layer.v1','blake3:ce27f95359ef70e2394ed5bafbd9f8a7b5b2355e1cea76ca7817a660f8efd99d','blake3:df74910689d9f9785432a0c647350572dbe7d105f63419f35f44430439c77afd','2026-12-01 11:42:12.473350',4195204,73841,3932160,'{"vmm": "qemu-microvm", "memMiB": 4}','{}');
CREATE TABLE repositories (
	id INTEGER NOT NULL, 
	namespace VARCHAR(64) NOT NULL, 
	name VARCHAR(64) NOT NULL, 
	public BOOLEAN NOT NULL, 
	description VARCHAR NOT NULL, 
	created_at DATETIME NOT NULL, 
	updated_at DATETIME NOT NULL, 
	PRIMARY KEY (id), 
	CONSTRAINT uq_repositories_name UNIQUE (namespace, name)
);
INSERT INTO "repositories" VALUES(1,'acme','py',0,'','2026-12-01 11:42:12.307663','2026-12-01 11:42:12.487772');
CREATE TABLE repository_blobs (
	repository_id INTEGER NOT NULL, 
	blob_digest VARCHAR(80) NOT NULL, 
	created_at DATETIME NOT NULL, 
	PRIMARY KEY (repository_id, blob_digest), 
	FOREIGN KEY(repository_id) REFERENCES repositories (id) ON DELETE CASCADE, 
	FOREIGN KEY(blob_digest) REFERENCES blobs (digest) ON DELETE CASCADE
);
INSERT INTO "repository_blobs" VALUES(1,'blake3:444aa4cd15f9b00f958fb7f1eca961eccf93b18d815467ccbba63c616fbbc9db','2026-12-01 11:42:12.331162');
INSERT INTO "repository_blobs" VALUES(1,'blake3:f90f5fee3b62aa9b8bd0e41811a10e7f4d62d9a484e46ee8612198e62bffe668','2026-12-01 11:42:12.346921');
INSERT INTO "repository_blobs" VALUES(1,'blake3:e93c6fe104a6ab0cb6cd86996d8e25e10d04833c8edd2ce547b922a60d96601f','2026-12-01 11:42:12.361492');
INSERT INTO "repository_blobs" VALUES(1,'blake3:0cf0de4a35d8ccb4042da4b3f5b3d08bee19cc8b9724b5a8a14ae3df71a8f9bb','2026-12-01 11:42:12.374996');
INSERT INTO "repository_blobs" VALUES(1,'blake3:df74910689d9f9785432a0c647350572dbe7d105f63419f35f44430439c77afd','2026-12-01 11:42:12.382188');
INSERT INTO "repository_blobs" VALUES(1,'blake3:bf26d01264f23d97fa0cbd17642c434b718e3a3d7211eddac2d1c828570864a6','2026-12-01 11:42:12.427327');
INSERT INTO "repository_blobs" VALUES(1,'blake3:ce27f95359ef70e2394ed5bafbd9f8a7b5b2355e1cea76ca7817a660f8efd99d','2026-12-01 11:42:12.439655');
INSERT INTO "repository_blobs" VALUES(1,'blake3:8c12c1b4cc1ac7c81e7d7c54742c09862f4157d66aad4b614b7b80af42ad1114','2026-12-01 11:42:12.452324');
INSERT INTO "repository_blobs" VALUES(1,'blake3:dadd421bf07447f126fca29f8a4ec16c62e71469e85293f215deeda015086987','2026-12-01 11:42:12.464729');
INSERT INTO "repository_blobs" VALUES(1,'blake3:6a2115f7eceaafc0ef0b8adb6aeab835cb7c48123cce2538f57da28350dee7b7','2026-12-01 11:42:12.473350');
CREATE TABLE repository_manifests (
	repository_id INTEGER NOT NULL, 
	manifest_digest VARCHAR(80) NOT NULL, 
	created_at DATETIME NOT NULL, 
	PRIMARY KEY (repository_id, manifest_digest), 
	FOREIGN KEY(repository_id) REFERENCES repositories (id) ON DELETE CASCADE, 
	FOREIGN KEY(manifest_digest) REFERENCES manifests (digest) ON DELETE CASCADE
);
INSERT INTO "repository_manifests" VALUES(1,'blake3:df74910689d9f9785432a0c647350572dbe7d105f63419f35f44430439c77afd','2026-12-01 11:42:12.382188');
INSERT INTO "repository_manifests" VALUES(1,'blake3:6a2115f7eceaafc0ef0b8adb6aeab835cb7c48123cce2538f57da28350dee7b7','2026-12-01 11:42:12.473350');
CREATE TABLE schema_versions (
	version INTEGER NOT NULL, 
	applied_at DATETIME NOT NULL, 
	PRIMARY KEY (version)
);
INSERT INTO "schema_versions" VALUES(1,'2026-12-01 11:42:12.211027');
CREATE TABLE tags (
	repository_id INTEGER NOT NULL, 
	name VARCHAR(128) NOT NULL, 
	manifest_digest VARCHAR(80) NOT NULL, 
	updated_at DATETIME NOT NULL, 
	PRIMARY KEY (repository_id, name), 
	FOREIGN KEY(repository_id) REFERENCES repositories (id) ON DELETE CASCADE, 
	FOREIGN KEY(manifest_digest) REFERENCES manifests (digest) ON DELETE RESTRICT
);
INSERT INTO "tags" VALUES(1,'head','blake3:6a2115f7eceaafc0ef0b8adb6aeab835cb7c48123cce2538f57da28350dee7b7','2026-12-01 11:42:12.487772');
CREATE TABLE tokens (
	id INTEGER NOT NULL, 
	name VARCHAR(64) NOT NULL, 
	token_hash VARCHAR(64) NOT NULL, 
	prefix VARCHAR(8) NOT NULL, 
	scopes TEXT NOT NULL, 
	created_at DATETIME NOT NULL, 
	expires_at DATETIME, 
	revoked_at DATETIME, 
	last_used_at DATETIME, 
	PRIMARY KEY (id), 
	UNIQUE (token_hash)
);
INSERT INTO "tokens" VALUES(1,'admin','3ce3946bc4d930fe031af90d4a37005661219e0e88bee456c8447e88c206c61a','fkd_Phuc','["admin"]','2026-12-01 11:42:12.215353',NULL,NULL,'2026-12-01 11:42:12.275778');
CREATE TABLE uploads (
	id VARCHAR(36) NOT NULL, 
	repository_id INTEGER NOT NULL, 
	size BIGINT NOT NULL, 
	created_at DATETIME NOT NULL, 
	updated_at DATETIME NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(repository_id) REFERENCES repositories (id) ON DELETE CASCADE
);
CREATE UNIQUE INDEX uq_tokens_active_name ON tokens (name) WHERE revoked_at IS NULL;
CREATE INDEX ix_repositories_namespace ON repositories (namespace);
CREATE INDEX ix_blobs_created_at ON blobs (created_at);
CREATE INDEX ix_manifests_parent_digest ON manifests (parent_digest);
CREATE INDEX ix_manifests_created_at ON manifests (created_at);
CREATE INDEX ix_audit_events_actor ON audit_events (actor);
CREATE INDEX ix_audit_events_at ON audit_events (at);
CREATE INDEX ix_audit_events_action ON audit_events (action);
CREATE INDEX ix_audit_events_repository ON audit_events (repository);
CREATE INDEX ix_repository_blobs_blob_digest ON repository_blobs (blob_digest);
CREATE INDEX ix_manifest_blobs_blob_digest ON manifest_blobs (blob_digest);
CREATE INDEX ix_repository_manifests_manifest_digest ON repository_manifests (manifest_digest);
CREATE INDEX ix_tags_manifest_digest ON tags (manifest_digest);
CREATE INDEX ix_chunks_blob_digest ON chunks (blob_digest);
CREATE INDEX ix_chunks_digest ON chunks (digest);
CREATE INDEX ix_uploads_updated_at ON uploads (updated_at);
COMMIT;
