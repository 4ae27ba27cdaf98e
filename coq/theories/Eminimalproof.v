(** The guarantee of [Eminimal.emplan_problem]: what it returns is
    [Minimal.mplan_problem]'s plan of collectives (so [mplan_spec] holds of
    it) or the exchange, checked and correct on the data; and its traffic
    is the least of every plan within the bound, the plans of collectives
    and the exchange alike. *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Rules Checker Semantics Validate Traffic Trafficproof Factor Refine
  Certify Certifyproof Pipeline Pipelineproof Crossmesh Exchange Exchangeproof Minimal Minimalproof Eminimal.
Import ListNotations.

Lemma prime_parts_splits : forall m, wf_mesh m -> splits m (prime_parts m).
Proof.
  intros m Hm. apply wf_meshb_spec in Hm. unfold wf_meshb in Hm. unfold splits, prime_parts.
  rewrite map_map. rewrite <- (map_id m) at 2. apply map_ext_in. intros n Hn.
  apply (proj1 (forallb_forall _ m) Hm) in Hn. apply Nat.ltb_lt in Hn.
  destruct (Nat.leb_spec n 1) as [H1|H1].
  - unfold prod. simpl. lia.
  - apply factors_prod. lia.
Qed.

Lemma exchange_below_spec : forall m src dst T x, exchange_below m src dst T = Some x ->
  exists ch, free_dim src dst = Some ch /\ Traffic.lower_bound m src dst < T /\
    x = Exchanged (Some ch) (Traffic.lower_bound m src dst).
Proof.
  intros m src dst T x H. unfold exchange_below in H.
  destruct (free_dim src dst) as [ch|]; [|discriminate].
  destruct (Traffic.lower_bound m src dst <? T) eqn:E; [|discriminate].
  injection H as <-. apply Nat.ltb_lt in E. eauto.
Qed.

Lemma exchange_below_none : forall m src dst T ch, exchange_below m src dst T = None ->
  free_dim src dst = Some ch -> T <= Traffic.lower_bound m src dst.
Proof.
  intros m src dst T ch H Hf. unfold exchange_below in H. rewrite Hf in H.
  destruct (Traffic.lower_bound m src dst <? T) eqn:E; [discriminate|]. apply Nat.ltb_ge in E. exact E.
Qed.

(** A candidate whose certificate fails was checked on a valid problem. *)
Lemma mplan_notleast_valid : forall m src dst cand cert T,
  mplan_problem m src dst cand cert = Err (MNotLeast T) -> valid_problem m src dst.
Proof.
  intros m src dst cand cert T H. unfold mplan_problem in H.
  destruct (problem_error m src dst) eqn:E; [discriminate|]. apply problem_error_valid, E.
Qed.

Lemma emplan_cases : forall m src dst cand cert out, emplan_problem m src dst cand cert = Ok out ->
  valid_problem m src dst /\
  ((exists fs p r, out = Collectives fs p r /\ mplan_problem m src dst cand cert = Ok (fs, p, r) /\
      exchange_below m src dst (Traffic.traffic (received r)) = None) \/
   exists ch, out = Exchanged (Some ch) (Traffic.lower_bound m src dst) /\
      free_dim src dst = Some ch).
Proof.
  intros m src dst cand cert out H. unfold emplan_problem in H.
  destruct (mplan_problem m src dst cand cert) as [[[fs p] r]|x] eqn:Em.
  - split; [exact (proj1 (mplan_spec _ _ _ _ _ _ _ _ Em))|].
    destruct (exchange_below m src dst (Traffic.traffic (received r))) as [y|] eqn:Eb.
    + injection H as <-. destruct (exchange_below_spec _ _ _ _ _ Eb) as [ch [Hf [_ ->]]]. right. exists ch. split; [reflexivity|exact Hf].
    + injection H as <-. left. exists fs, p, r. split; [reflexivity|]. split; [reflexivity|exact Eb].
  - destruct x as [i e|pk|T]; try discriminate.
    split; [eapply mplan_notleast_valid; eauto|].
    destruct (exchange_below m src dst T) as [y|] eqn:Eb; [|discriminate].
    injection H as <-. destruct (exchange_below_spec _ _ _ _ _ Eb) as [ch [Hf [_ ->]]]. right. exists ch. split; [reflexivity|exact Hf].
Qed.

(** What [emplan_problem] returns, when it answers: the problem is valid,
    and either [Minimal.mplan_problem]'s plan of collectives for the same
    candidate and certificate (so [Minimalproof.mplan_spec] holds of it:
    checked over a split of the user's mesh, every type within
    [bound m src dst], every device ends with its target block of any
    global array, its traffic least of any plan of collectives within the
    bound), which receives no more than the exchange where a free dimension
    lets the exchange run in pieces; or the one-step exchange, along a free
    dimension [ch] (neither type shards it, at least two indices), whose
    schedule exists, which the exchange checker accepts with the peak
    [bound m src dst] and the lower bound as what the worst device
    receives, and which gives every device its target block of any global
    array. *)
Theorem emplan_spec : forall m src dst cand cert out,
  emplan_problem m src dst cand cert = Ok out ->
  valid_problem m src dst /\
  match out with
  | Collectives fs p r => mplan_problem m src dst cand cert = Ok (fs, p, r) /\
      (forall ch, free_dim src dst = Some ch -> Traffic.traffic (received r) <= Traffic.lower_bound m src dst)
  | Exchanged och rx =>
      exists ch pss, och = Some ch /\ exchange m src dst = Some pss /\ rx = Traffic.lower_bound m src dst /\
      echeck m src dst [Exch dst] = Ok (mkreport [src; dst] (bound m src dst) [rx]) /\
      (exists D D', nth_error src ch = Some D /\ nth_error dst ch = Some D' /\
         axes D = [] /\ axes D' = [] /\ 2 <= gsize D) /\
      (forall V (A : list nat -> V) j i, j < ndevices m -> in_range m dst i ->
         assemble (fun r => local A m src (coords_of_rank m r)) (sdims m src)
           (tbox m dst (coords_of_rank m j)) (nth j pss []) i = Some (local A m dst (coords_of_rank m j) i))
  end.
Proof.
  intros m src dst cand cert out H.
  destruct (emplan_cases _ _ _ _ _ _ H) as [Hv [[fs [p [r [-> [Em Eb]]]]]|[ch [-> Hf]]]].
  - split; [exact Hv|]. split; [exact Em|]. intros ch Hf. eapply exchange_below_none; eauto.
  - split; [exact Hv|].
    destruct (exchange_total m src dst (valid_uvalid_problem m src dst Hv)) as [pss Ex].
    exists ch, pss. split; [reflexivity|]. split; [exact Ex|]. split; [reflexivity|].
    split; [apply echeck_exchange with pss; auto|].
    split; [apply free_dim_spec; auto|]. intros. apply exchange_correct; auto.
Qed.

(** **Least over both**: what [emplan_problem] returns receives no more
    than any plan the exchange checker [Exchange.echeck] accepts within
    [bound m src dst] on the user's mesh (every plan of collectives
    [Checker.check] accepts, and the one-step exchange, counted where a free
    dimension lets it run in pieces, as [plan(..., exchange=True)] runs
    it), and no more than any plan of collectives within that bound over
    the prime sub-axes of size 2 or more. *)
Theorem emplan_least : forall m src dst cand cert out,
  emplan_problem m src dst cand cert = Ok out ->
  (forall p' r', echeck m src dst p' = Ok r' -> peak r' <= bound m src dst ->
     (p' = [Exch dst] -> free_dim src dst <> None) ->
     planned_traffic out <= Traffic.traffic (received r')) /\
  (forall p' r', check (rmesh (prime_parts m)) (rtype (prime_parts m) src) (rtype (prime_parts m) dst) p' = Ok r' ->
     peak r' <= bound m src dst -> planned_traffic out <= Traffic.traffic (received r')).
Proof.
  intros m src dst cand cert out H.
  destruct (emplan_cases _ _ _ _ _ _ H) as [Hv [[fs [p [r [-> [Em Eb]]]]]|[ch [-> Hf]]]];
    pose proof Hv as [Hsrc [Hdst _]]; cbn [planned_traffic].
  - destruct (mplan_spec _ _ _ _ _ _ _ _ Em) as [_ [_ [_ [_ [_ [_ [_ [_ [Hmin_m [_ Hmin_g]]]]]]]]]].
    split; [|exact Hmin_g].
    intros p' r' Hc Hpk Hx. destruct (echeck_spec _ _ _ _ _ Hc) as [[cs [_ Hcs]]|[-> [_ [_ [_ ->]]]]].
    + eapply Hmin_m; eauto.
    + destruct (free_dim src dst) as [ch|] eqn:Hf; [|exfalso; apply Hx; reflexivity].
      pose proof (exchange_below_none _ _ _ _ _ Eb Hf). cbn. lia.
  - split.
    + intros p' r' Hc _ _. destruct (echeck_spec _ _ _ _ _ Hc) as [[cs [_ Hcs]]|[-> [_ [_ [_ ->]]]]].
      * eapply accepted_traffic_lower_bound; eauto.
      * cbn. lia.
    + intros p' r' Hc _.
      assert (Hm : wf_mesh m) by apply Hsrc.
      rewrite <- (refine_lower_bound m (prime_parts m)) by (auto; apply prime_parts_splits; auto).
      eapply accepted_traffic_lower_bound; eauto.
Qed.
